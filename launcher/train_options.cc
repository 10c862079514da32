#include "launcher/train_options.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/env/env.h"
#include "common/flags.h"
#include "common/hostname.h"
#include "common/status_macros.h"
#include "launcher/save_path.h"
#include "worker/io/data_loader.h"
#include "worker/io/token_file.h"
#include "worker/train/eval_loss.h"

namespace zeroshard {
namespace {

// --checkpoint_dir without an interval from --checkpoint_interval or the
// config: checkpoint every this many steps.
constexpr int64_t kDefaultCheckpointInterval = 100;

absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError(message);
}

absl::Status CheckData(TrainOptions& o) {
  if (o.train.data.empty()) return Invalid("--data is required (token files)");
  std::vector<std::string> patterns =
      absl::StrSplit(o.train.data, ',', absl::SkipEmpty());
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

// What every worker's data loader will check, before anything starts: each
// file holds one step of the whole job (W*B*T + 1 tokens) and no id at or
// above the model's vocabulary (a pass over the files, in bounded chunks).
absl::Status CheckDataContents(const TrainOptions& o) {
  io::DataLoaderOptions lo;
  lo.files = o.data_files;
  lo.batch_size = o.spec.zero.micro_batch;
  lo.seq_len = o.spec.zero.seq_len;
  lo.rank = 0;
  lo.world_size = static_cast<int>(o.workers);
  lo.vocab_size = o.spec.config.vocab_size;
  absl::Status s = io::CheckTrainingData(lo);
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat("--data ", s.message()));
}

// With --checkpoint_dir: stages 1-3, and an interval (the default one
// when neither --checkpoint_interval nor the config gives one).
absl::Status CheckCheckpoints(TrainOptions& o) {
  if (o.checkpoint_dir.empty()) return absl::OkStatus();
  if (o.engine.zero.stage == 0) {
    return Invalid(
        "stage 0 has no servers to checkpoint; drop --checkpoint_dir");
  }
  int64_t& interval = o.train.checkpoint_interval;
  if (interval == 0) {
    return Invalid("--checkpoint_dir needs --checkpoint_interval >= 1");
  }
  if (interval < 0 && o.engine.zeroshard.checkpoint_interval == 0) {
    interval = kDefaultCheckpointInterval;
  }
  return absl::OkStatus();
}

// --val_data as the worker of rank 0 will open it (before anything starts).
absl::Status CheckValData(const TrainOptions& o) {
  if (o.train.val_data.empty()) return absl::OkStatus();
  return train::OpenEvalSet(o.spec, o.train.val_data).status();
}

// --save: its directory is writable, and it is none of the input files.
absl::Status CheckSave(const TrainOptions& o) {
  std::vector<InputFile> inputs;
  for (const std::string& f : o.data_files) inputs.push_back({"--data", f});
  std::vector<std::string> patterns =
      absl::StrSplit(o.train.val_data, ',', absl::SkipEmpty());
  auto val_files = io::ExpandFilePatterns(patterns);
  for (size_t i = 0; val_files.ok() && i < val_files->size(); ++i) {
    inputs.push_back({"--val_data", (*val_files)[i]});
  }
  return CheckSavePath(o.train.save, inputs, o.work_dir);
}

// A checkpoint interval (the flag's or the config's) without
// --checkpoint_dir: the servers the launcher starts would have nowhere to
// write, and the first checkpoint would fail the job.
absl::Status CheckCheckpointDirForInterval(const TrainOptions& o) {
  const int interval = o.spec.zero.checkpoint_interval;
  if (o.num_servers == 0 || !o.checkpoint_dir.empty() || interval <= 0) {
    return absl::OkStatus();
  }
  return Invalid(absl::StrCat(
      o.train.checkpoint_interval > 0
          ? "--checkpoint_interval "
          : "the config's zeroshard.checkpoint_interval ",
      interval,
      " needs --checkpoint_dir: the servers the launcher starts write "
      "checkpoints there (running servers: --server_addrs)"));
}

absl::Status CheckServers(TrainOptions& o) {
  if (o.spec.zero.stage == 0) {
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
    for (const std::string& a : o.server_addresses) {
      absl::Status port = CheckServerAddress(a);
      if (!port.ok()) {
        return Invalid(absl::StrCat("--server_addrs: ", port.message()));
      }
    }
  } else if (o.servers > 0) {
    o.num_servers = o.servers;
    const config::ZeroShardConfig& zs = o.engine.zeroshard;
    const size_t in_config = zs.server_addresses.empty()
                                 ? static_cast<size_t>(zs.num_servers)
                                 : zs.server_addresses.size();
    if (in_config > 0 && in_config != o.servers) {
      o.config_warnings.push_back(absl::StrCat(
          "--servers ", o.servers,
          " overrides the config's zeroshard.servers (", in_config, ")"));
    }
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
  if (o.server_threads > 1024) {
    return Invalid("--server_threads must be in [0, 1024] (0: automatic)");
  }
  if (o.num_servers > 0) {
    if (o.server_threads == 0) {
      o.server_threads =
          AutoServerThreads(o.num_servers, std::thread::hardware_concurrency());
    }
    o.server_flags = config::NvmeServerFlags(o.engine);
  } else if (o.server_threads > 0) {
    return Invalid(
        "--server_threads is for the servers the launcher starts; give "
        "yours zeroshard-server --threads");
  }
  if (o.num_servers > 0 && !ClientSecurityArgs(o.train.security).empty()) {
    return Invalid(
        "--tls_*, --token_file and --insecure are for --server_addrs; the "
        "servers the launcher starts are plaintext on loopback");
  }
  return absl::OkStatus();
}

absl::Status Check(TrainOptions& o) {
  ZS_RETURN_IF_ERROR(train::ValidateTrainFlags(o.train));
  if (o.workers < 1 || o.workers > 256) {
    return Invalid("--workers must be in [1, 256]");
  }
  if (o.nodes < 1 || o.workers % o.nodes != 0) {
    return Invalid(absl::StrCat(
        "--nodes ", o.nodes, " must be >= 1 and divide --workers ", o.workers));
  }
  if (!o.worker_binary.empty() && !DefaultEnv()->FileExists(o.worker_binary)) {
    return absl::NotFoundError(
        absl::StrCat("--worker_binary ", o.worker_binary, " does not exist"));
  }
  ZS_RETURN_IF_ERROR(CheckData(o));
  ZS_ASSIGN_OR_RETURN(
      o.engine, train::ParseConfigForFlags(o.train, static_cast<int>(o.workers),
                                           &o.config_warnings));
  ZS_RETURN_IF_ERROR(CheckCheckpoints(o));
  ZS_ASSIGN_OR_RETURN(o.spec,
                      train::TrainSpecFromFlags(o.train, o.engine, nullptr));
  ZS_RETURN_IF_ERROR(CheckDataContents(o));
  ZS_RETURN_IF_ERROR(CheckValData(o));
  ZS_RETURN_IF_ERROR(CheckSave(o));
  ZS_RETURN_IF_ERROR(CheckServers(o));
  return CheckCheckpointDirForInterval(o);
}

}  // namespace

uint32_t AutoServerThreads(uint32_t servers, unsigned cores) {
  return std::max<uint32_t>(2, cores / std::max<uint32_t>(1, servers));
}

void AddServerFlags(FlagSet* flags, std::string* server_addrs,
                    uint32_t* server_threads) {
  flags->String("server_addrs", server_addrs,
                "use these running servers (host:port,...) instead");
  flags->Uint32("server_threads", server_threads,
                "optimizer threads of each server it starts (default 0: the "
                "machine's cores shared out among the servers, at least 2; "
                "the ranks wait while the servers step)");
}

void AddWorkerCountHints(FlagSet* flags) {
  for (const char* name : {"nproc_per_node", "num_gpus"}) {
    flags->Foreign(name, "torchrun's and deepspeed's: here --workers=N");
  }
}

absl::StatusOr<TrainOptions> ParseTrainOptions(int argc, char** argv) {
  TrainOptions o;
  FlagSet flags(
      "zeroshard train",
      "zeroshard train --config ds_config.json --data tokens.bin [flags]\n\n"
      "Trains GPT-2 with ZeRO on this machine: starts shard servers (unless\n"
      "--server_addrs names running ones) and --workers zeroshard-worker\n"
      "processes, shows progress, writes metrics and a report to --work_dir.\n"
      "The flags from --config to --insecure are zeroshard-worker's and go\n"
      "to every worker. Flags may be spelled with '-' or '_' (--model-file\n"
      "= --model_file).");
  train::AddTrainFlags(&flags, &o.train);
  flags.Uint32("servers", &o.servers,
               "shard servers to start (default: the config's count, else 2)");
  AddServerFlags(&flags, &o.server_addrs, &o.server_threads);
  flags.Uint32("workers", &o.workers, "worker processes W");
  AddWorkerCountHints(&flags);
  flags.Foreign("deepspeed_config", "a script's flag: here --config");
  flags.Uint32("nodes", &o.nodes,
               "simulated nodes M (W/M local ranks each, on this machine)");
  flags.String("checkpoint_dir", &o.checkpoint_dir,
               "the servers checkpoint here every --checkpoint_interval steps "
               "(100 when neither it nor the config gives an interval; an "
               "interval needs it when the launcher starts the servers); a "
               "run started again with the same directory resumes from the "
               "newest complete checkpoint, and a server that dies is "
               "restarted from it while the workers roll back");
  flags.Uint32("max_restarts", &o.max_restarts,
               "with --checkpoint_dir (servers started here): times the "
               "workers are started again after one fails, continuing from "
               "the servers' state; then the job stops");
  flags.String("work_dir", &o.work_dir,
               "logs, metrics.jsonl, loss.svg and report.md go here");
  flags.Int64("print_every", &o.print_every,
              "steps between plain progress lines when not on a terminal");
  flags.Int64("stall_seconds", &o.stall_seconds,
              "after this many seconds without a step, say so and which "
              "shard servers do not answer (a stopped or stuck process); "
              "again every as many seconds while it lasts; 0: never");
  flags.String("worker_binary", &o.worker_binary,
               "for tests: run this worker binary instead of zeroshard-worker "
               "(e.g. zeroshard-worker-for-tests, which has failure points)");
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

std::vector<std::string> WorkerArgs(const TrainOptions& o,
                                    const std::string& servers) {
  train::TrainFlags f = o.train;
  f.data = absl::StrJoin(o.data_files, ",");          // as checked here
  if (o.num_servers > 0) f.security.insecure = true;  // our loopback fleet
  std::vector<std::string> args = train::TrainFlagsArgv(f);
  args.push_back("--metrics_file=" + o.work_dir + "/metrics-rank%r.jsonl");
  if (!servers.empty()) args.push_back("--servers=" + servers);
  return args;
}

}  // namespace zeroshard
