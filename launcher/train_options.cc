#include "launcher/train_options.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/flags.h"
#include "common/status_macros.h"
#include "worker/config/ds_options.h"
#include "worker/io/data_loader.h"
#include "worker/io/model_file.h"
#include "worker/io/token_file.h"

namespace zeroshard {
namespace {

absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError(message);
}

// "L,H,C" -> the model with vocabulary `vocab` and maxT = `seq_len`.
absl::StatusOr<gpt2::Config> ModelFromFlags(const TrainOptions& o) {
  std::vector<std::string> parts = absl::StrSplit(o.model_config, ',');
  int v[3];
  if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &v[0]) ||
      !absl::SimpleAtoi(parts[1], &v[1]) ||
      !absl::SimpleAtoi(parts[2], &v[2])) {
    return Invalid(
        absl::StrCat("--model_config '", o.model_config,
                     "' is not LAYERS,HEADS,CHANNELS (e.g. 2,4,128)"));
  }
  gpt2::Config c{static_cast<int>(o.seq_len),
                 static_cast<int>(o.vocab),
                 static_cast<int>(o.vocab),
                 v[0],
                 v[1],
                 v[2]};
  absl::Status s = gpt2::ValidateConfig(c);
  if (!s.ok()) {
    return Invalid(
        absl::StrCat("--model_config ", o.model_config, ": ", s.message()));
  }
  return c;
}

absl::Status CheckData(TrainOptions& o) {
  if (o.data.empty()) return Invalid("--data is required (token files)");
  std::vector<std::string> patterns =
      absl::StrSplit(o.data, ',', absl::SkipEmpty());
  auto files = io::ExpandFilePatterns(patterns);
  if (!files.ok()) return files.status();
  if (files->empty()) return absl::NotFoundError("--data matches no file");
  for (const std::string& f : *files) {
    auto file = io::TokenFile::Open(f);
    if (!file.ok()) return file.status();
  }
  o.data_files = *files;
  return absl::OkStatus();
}

absl::Status CheckServers(TrainOptions& o) {
  if (o.zero.stage == 0) {
    if (!o.server_addrs.empty() || o.servers > 0) {
      return Invalid(
          "stage 0 uses no shard servers; drop --servers/--server_addrs");
    }
    return absl::OkStatus();
  }
  if (!o.server_addrs.empty() && o.servers > 0) {
    return Invalid(
        "give --servers (start them) or --server_addrs (use them), not both");
  }
  if (!o.server_addrs.empty()) {
    o.server_addresses = absl::StrSplit(o.server_addrs, ',', absl::SkipEmpty());
  } else if (o.servers > 0) {
    o.num_servers = o.servers;
  } else if (!o.engine.zeroshard.server_addresses.empty()) {
    o.server_addresses = o.engine.zeroshard.server_addresses;
  } else {
    o.num_servers =
        o.engine.zeroshard.num_servers > 0 ? o.engine.zeroshard.num_servers : 2;
  }
  if (o.num_servers > 64) return Invalid("--servers must be in [1, 64]");
  if (!o.checkpoint_dir.empty() && o.num_servers == 0) {
    return Invalid(
        "--checkpoint_dir is for the servers the launcher starts; start "
        "yours with zeroshard-server --checkpoint_dir");
  }
  if (o.checkpoint_every < 1) return Invalid("--checkpoint_every must be >= 1");
  if (o.num_servers > 0 && !ClientSecurityArgs(o.security).empty()) {
    return Invalid(
        "--tls_*, --token_file and --insecure are for --server_addrs; the "
        "servers the launcher starts are plaintext on loopback");
  }
  return absl::OkStatus();
}

absl::Status Check(TrainOptions& o) {
  if (o.config.empty()) return Invalid("--config is required (DeepSpeed JSON)");
  if (o.workers < 1 || o.workers > 256) {
    return Invalid("--workers must be in [1, 256]");
  }
  if (o.nodes < 1 || o.workers % o.nodes != 0) {
    return Invalid(absl::StrCat(
        "--nodes ", o.nodes, " must be >= 1 and divide --workers ", o.workers));
  }
  if (o.steps < 1) return Invalid("--steps must be >= 1");
  if (o.seq_len < 1) return Invalid("--seq_len must be >= 1");
  if (o.threads < 1) return Invalid("--threads must be >= 1");
  ZS_RETURN_IF_ERROR(CheckData(o));
  ZS_ASSIGN_OR_RETURN(
      o.engine, config::ParseDeepSpeedConfigFile(
                    o.config, static_cast<int>(o.workers), &o.config_warnings));
  if (!o.model_file.empty()) {
    ZS_ASSIGN_OR_RETURN(io::ModelFileInfo info,
                        io::ReadModelFileInfo(o.model_file));
    o.model = info.config;
    if (o.seq_len > o.model.max_seq_len) {
      return Invalid(absl::StrCat("--seq_len ", o.seq_len,
                                  " exceeds the model file's max_seq_len ",
                                  o.model.max_seq_len));
    }
  } else {
    ZS_ASSIGN_OR_RETURN(o.model, ModelFromFlags(o));
  }
  auto zero = config::ZeroOptionsFromConfig(
      o.engine, o.model, static_cast<int>(o.seq_len), nullptr);
  if (!zero.ok()) {
    return absl::Status(zero.status().code(),
                        absl::StrCat(o.config, ": ", zero.status().message()));
  }
  o.zero = *zero;
  return CheckServers(o);
}

}  // namespace

absl::StatusOr<TrainOptions> ParseTrainOptions(int argc, char** argv) {
  TrainOptions o;
  FlagSet flags(
      "zeroshard train",
      "zeroshard train --config ds_config.json --data tokens.bin [flags]\n\n"
      "Trains GPT-2 with ZeRO on this machine: starts shard servers (unless\n"
      "--server_addrs names running ones) and --workers "
      "zeroshard-worker\n"
      "processes, shows progress, writes metrics and a report to --work_dir.\n"
      "Flags may be spelled with '-' or '_' (--model-file = --model_file).");
  flags.String("config", &o.config, "DeepSpeed JSON config (required)");
  flags.String("data", &o.data,
               "token files or patterns, comma-separated (required)");
  flags.Uint32("servers", &o.servers,
               "shard servers to start (default: the config's count, else 2)");
  flags.String("server_addrs", &o.server_addrs,
               "use these running servers (host:port,...) instead");
  flags.Uint32("workers", &o.workers, "worker processes W");
  flags.Uint32("nodes", &o.nodes,
               "simulated nodes M (W/M local ranks each, on this machine)");
  flags.String("model_file", &o.model_file,
               "initial model (llm.c format); overrides --model_config");
  flags.String("model_config", &o.model_config,
               "LAYERS,HEADS,CHANNELS of a seeded GPT-2 (maxT = --seq_len)");
  flags.Int64("vocab", &o.vocab, "vocabulary with --model_config");
  flags.Int64("seq_len", &o.seq_len, "sequence length T");
  flags.Int64("steps", &o.steps, "optimizer steps S");
  flags.String("save", &o.save, "write the final model here (llm.c, fp32)");
  flags.String("checkpoint_dir", &o.checkpoint_dir,
               "the servers checkpoint here every --checkpoint_every steps; "
               "a run started again with the same directory resumes from "
               "the newest complete checkpoint, and a server that dies is "
               "restarted from it while the workers roll back");
  flags.Int64("checkpoint_every", &o.checkpoint_every,
              "steps between checkpoints (with --checkpoint_dir)");
  flags.String("work_dir", &o.work_dir,
               "logs, metrics.jsonl, loss.svg and report.md go here");
  flags.Int64("print_every", &o.print_every,
              "steps between plain progress lines when not on a terminal");
  flags.Int64("threads", &o.threads, "CPU kernel threads per worker");
  flags.Int64("seed", &o.seed, "seeded initial weights");
  flags.Double("init_std", &o.init_std, "std of matrices at seeded init");
  AddClientSecurityFlags(&flags, &o.security);
  auto rest = flags.Parse(argc, argv, 2);
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    std::exit(0);
  }
  if (!rest.ok()) return rest.status();
  if (!rest->empty()) {
    return Invalid(absl::StrCat("unexpected argument '", (*rest)[0], "'"));
  }
  ZS_RETURN_IF_ERROR(Check(o));
  return o;
}

std::vector<std::string> WorkerFlags(const TrainOptions& o,
                                     const std::string& servers) {
  std::vector<std::string> f = {
      "--config=" + o.config,
      "--data=" + absl::StrJoin(o.data_files, ","),
      absl::StrCat("--seq_len=", o.seq_len),
      absl::StrCat("--steps=", o.steps),
      absl::StrCat("--threads=", o.threads),
      absl::StrCat("--seed=", o.seed),
      absl::StrCat("--init_std=", o.init_std),
      "--metrics_file=" + o.work_dir + "/metrics-rank%r.jsonl",
  };
  if (!servers.empty()) f.push_back("--servers=" + servers);
  if (!o.checkpoint_dir.empty()) {
    f.push_back(absl::StrCat("--checkpoint_interval=", o.checkpoint_every));
  }
  for (std::string& a : ClientSecurityArgs(o.security)) f.push_back(a);
  if (o.num_servers > 0) f.push_back("--insecure");  // our loopback fleet
  if (!o.model_file.empty()) {
    f.push_back("--model_file=" + o.model_file);
  } else {
    const gpt2::Config& c = o.model;
    f.push_back(absl::StrCat("--max_seq_len=", c.max_seq_len));
    f.push_back(absl::StrCat("--vocab=", c.vocab_size));
    f.push_back(absl::StrCat("--layers=", c.num_layers));
    f.push_back(absl::StrCat("--heads=", c.num_heads));
    f.push_back(absl::StrCat("--channels=", c.channels));
  }
  return f;
}

}  // namespace zeroshard
