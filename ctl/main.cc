// zeroshard-ctl: the admin CLI for running shard servers.
//
//   zeroshard-ctl health --servers=HOST:PORT,...
//   zeroshard-ctl stats  --servers=...
//   zeroshard-ctl plan   --servers=... | --spec=spec.json
//   zeroshard-ctl gather --servers=... (--tensor=NAME | --offset=O
//                        --length=N) [--dtype=fp32|bf16|fp16] --out=FILE
//   zeroshard-ctl checkpoint --servers=... [--tag=T]
//   zeroshard-ctl restore    --servers=... [--step=N]
//   zeroshard-ctl export     --servers=... --heads=NH [--vocab=V] --out=FILE
//   zeroshard-ctl import     --servers=... --model=FILE
//
// Every command but health and stats needs a model registered on the
// servers (a job's workers register one when they start).
//
// checkpoint/restore: ctl/checkpoint_commands.h; export/import (GPT-2 model
// files in llm.c's format): ctl/model_commands.h.
//
// Exit codes: 0 success, 1 a server answered with an error or is not
// serving, or has no model registered, or a model file does not fit the
// registered model; 2 bad command line (a missing or malformed --model
// file included).
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/security.h"
#include "client/shard_client.h"
#include "common/env/env.h"
#include "common/flags.h"
#include "common/hostname.h"
#include "common/malloc_tuning.h"
#include "common/model_spec.h"
#include "common/version.h"
#include "ctl/checkpoint_commands.h"
#include "ctl/checkpoint_list.h"
#include "ctl/model_commands.h"
#include "fleet/local_fleet.h"
#include "google/protobuf/util/json_util.h"

namespace zeroshard {
namespace {

constexpr char kUsage[] =
    "zeroshard-ctl COMMAND [flags]\n\n"
    "Commands:\n"
    "  health   check grpc.health.v1 on every server\n"
    "  stats    per-server step, bytes held, contributions, throughput\n"
    "  plan     print the partition plan (from --spec or the servers)\n"
    "  gather   write a tensor or flat range to --out (raw little-endian)\n"
    "  checkpoint  checkpoint the servers' current step (servers need\n"
    "              --checkpoint_dir); prints each shard's file and CRC\n"
    "  restore  restore --step (default: the newest complete on every\n"
    "           server) at a new epoch; prints the trainer state\n"
    "  export   write the registered GPT-2 model to --out as an llm.c model\n"
    "           file (needs --heads)\n"
    "  import   write the weights of the llm.c model file --model into the\n"
    "           registered model (same layout)\n"
    "  list     the checkpoints in --checkpoint_dir, read from disk (no\n"
    "           servers): complete, incomplete, damaged, snapshots; --verify\n"
    "           reads every file whole; exit 1 if anything is damaged";

std::string HumanBytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f %s", b, units[u]);
  return buf;
}

absl::StatusOr<v1::ModelSpec> ReadSpecFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadSmallFile(DefaultEnv(), path);
  if (!text.ok()) return text.status();
  v1::ModelSpec spec;
  auto s = google::protobuf::util::JsonStringToMessage(*text, &spec);
  if (!s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a ModelSpec in JSON: ", s.ToString()));
  }
  return spec;
}

int Health(const std::vector<std::string>& servers,
           const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
  int bad = 0;
  for (size_t k = 0; k < servers.size(); ++k) {
    absl::Status s =
        CheckHealth(servers[k], std::chrono::seconds(5), credentials);
    std::printf("shard %zu  %-22s %s\n", k, servers[k].c_str(),
                s.ok() ? "SERVING" : std::string(s.message()).c_str());
    bad += !s.ok();
  }
  return bad == 0 ? 0 : 1;
}

int Stats(ShardClient& client) {
  auto stats = client.Stats();
  if (!stats.ok()) {
    std::fprintf(stderr, "zeroshard-ctl: %s\n",
                 std::string(stats.status().message()).c_str());
    return 1;
  }
  std::printf("%-5s %-22s %6s %6s %12s %11s %11s %8s %6s %8s %11s %11s %9s\n",
              "shard", "address", "step", "epoch", "elements", "state", "rss",
              "contrib", "dups", "rejected", "pushed", "gathered", "adamw/s");
  for (const auto& s : *stats) {
    std::printf(
        "%-5u %-22s %6llu %6llu %12llu %11s %11s %8llu %6llu %8llu %11s "
        "%11s %9.3g\n",
        s.shard_index(), client.options().addresses[s.shard_index()].c_str(),
        static_cast<unsigned long long>(s.step()),
        static_cast<unsigned long long>(s.epoch()),
        static_cast<unsigned long long>(s.owned_elements()),
        HumanBytes(s.bytes_held()).c_str(),
        HumanBytes(s.bytes_held_rss()).c_str(),
        static_cast<unsigned long long>(s.contributions_applied()),
        static_cast<unsigned long long>(s.duplicates_ignored()),
        static_cast<unsigned long long>(s.requests_rejected()),
        HumanBytes(s.bytes_pushed()).c_str(),
        HumanBytes(s.bytes_gathered()).c_str(),
        s.optimizer_elements_per_second());
  }
  for (const auto& s : *stats) {  // the storage tier, when not RAM
    if (s.storage().empty() || s.storage() == "ram") continue;
    std::printf(
        "shard %u storage %s: read %s, written %s; last step I/O wait "
        "%.3g s, %s/s\n",
        s.shard_index(), s.storage().c_str(),
        HumanBytes(s.storage_bytes_read()).c_str(),
        HumanBytes(s.storage_bytes_written()).c_str(),
        s.last_step_io_wait_seconds(),
        HumanBytes(static_cast<uint64_t>(s.last_step_io_bytes_per_second()))
            .c_str());
  }
  for (const auto& s : *stats) {  // checkpoints, with --checkpoint_dir
    if (s.checkpoint_steps().empty() && s.restored_step() == 0) continue;
    std::printf(
        "shard %u checkpoints: steps %s; restored step %llu; %llu written\n",
        s.shard_index(),
        s.checkpoint_steps().empty()
            ? "none"
            : absl::StrJoin(s.checkpoint_steps(), " ").c_str(),
        static_cast<unsigned long long>(s.restored_step()),
        static_cast<unsigned long long>(s.checkpoints_written()));
  }
  return 0;
}

int Plan(const v1::ModelSpec& spec) {
  auto plan = PlanForSpec(spec);
  if (!plan.ok()) {
    std::fprintf(stderr, "zeroshard-ctl: %s\n",
                 std::string(plan.status().message()).c_str());
    return 1;
  }
  std::printf(
      "job %s: %llu elements, %u servers, alignment %u, plan hash "
      "%016llx\n",
      spec.job_id().c_str(), static_cast<unsigned long long>(plan->total()),
      plan->num_servers(), plan->alignment(),
      static_cast<unsigned long long>(plan->Hash()));
  for (uint32_t k = 0; k < plan->num_servers(); ++k) {
    const Range r = plan->ServerRange(k);
    std::printf("  shard %u: [%llu, %llu)  %llu elements\n", k,
                static_cast<unsigned long long>(r.begin),
                static_cast<unsigned long long>(r.end),
                static_cast<unsigned long long>(r.size()));
  }
  for (const TensorInfo& t : plan->tensors()) {
    std::vector<std::string> owners;
    for (const ShardPiece& p : plan->Split(t.range)) {
      owners.push_back(absl::StrCat(p.server));
    }
    std::printf("  %-24s %-14s group %u  [%llu, %llu)  shards %s\n",
                t.desc.name.c_str(), absl::StrJoin(t.desc.shape, "x").c_str(),
                t.desc.param_group,
                static_cast<unsigned long long>(t.range.begin),
                static_cast<unsigned long long>(t.range.end),
                absl::StrJoin(owners, ",").c_str());
  }
  return 0;
}

// Attaches `client` to the model registered on the servers. Servers that
// have none (GetStats with an empty spec) get an error saying so and what
// registers one, rather than the empty spec's first fault.
absl::Status AttachToModel(ShardClient& client) {
  absl::Status s = client.AttachToRegistered();
  if (s.ok()) return s;
  auto stats = client.Stats();
  if (!stats.ok() || stats->empty() || !(*stats)[0].spec().job_id().empty()) {
    return s;
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "no model is registered on the servers (",
      absl::StrJoin(client.options().addresses, ","),
      "): a job's workers register one when they start (zeroshard train "
      "--server_addrs=..., zeroshard-worker --servers=...), and a server "
      "started with a --checkpoint_dir that holds a checkpoint restores it"));
}

// checkpoint, restore, export, import: one line on success.
int Admin(ShardClient& client, const std::string& command,
          const std::string& tag, int64_t step, int64_t heads, int64_t vocab,
          const std::string& out, const std::string& model) {
  absl::StatusOr<std::string> line;
  if (command == "checkpoint") {
    line = ctl::TakeCheckpoint(client, tag);
  } else if (command == "restore") {
    line = ctl::RestoreCheckpoint(
        client, step < 0
                    ? std::nullopt
                    : std::optional<uint64_t>(static_cast<uint64_t>(step)));
  } else if (command == "export") {
    line = ctl::ExportModel(client, out, heads, vocab);
  } else {
    line = ctl::ImportModel(client, model);
  }
  if (!line.ok()) {
    std::fprintf(stderr, "zeroshard-ctl: %s\n",
                 std::string(line.status().message()).c_str());
    return 1;
  }
  std::printf("%s\n", line->c_str());
  return 0;
}

int Main(int argc, char** argv) {
  TuneMallocForTransfers();  // `gather` may move much data
  std::string servers_flag, spec_path, tensor, dtype_name = "fp32", out;
  std::string tag, model;
  int64_t offset = -1, length = -1, deadline_ms = 30000;
  int64_t restore_step = -1, heads = 0, vocab = 0;
  FlagSet flags("zeroshard-ctl", kUsage);
  flags.String("servers", &servers_flag,
               "Comma-separated shard server addresses, shard 0 first.");
  flags.String("spec", &spec_path, "plan: a ModelSpec in JSON.");
  flags.String("tensor", &tensor, "gather: the tensor to fetch.");
  flags.Int64("offset", &offset, "gather: flat element offset.");
  flags.Int64("length", &length, "gather: number of elements.");
  flags.String("dtype", &dtype_name, "gather: fp32, bf16 or fp16.");
  flags.String("out", &out, "gather, export: output file.");
  flags.String("tag", &tag,
               "checkpoint: a label stored in the manifest (printable "
               "characters).");
  flags.Int64("step", &restore_step,
              "restore: the step (0 too); -1 = the newest complete on every "
              "server.");
  flags.Int64("heads", &heads,
              "export: attention heads (not in the registered spec).");
  flags.Int64("vocab", &vocab,
              "export: real vocabulary size for the header; 0 = the "
              "embedding's rows.");
  flags.String("model", &model, "import: the llm.c model file to load.");
  std::string checkpoint_dir;
  bool verify = false;
  flags.String("checkpoint_dir", &checkpoint_dir,
               "list: a checkpoint directory (the servers' --checkpoint_dir).");
  flags.Bool("verify", &verify,
             "list: read every shard file whole (block and file CRC-32C).");
  flags.Int64("deadline_ms", &deadline_ms, "Deadline of each RPC.");
  ClientSecurityFlags security;
  AddClientSecurityFlags(&flags, &security);
  std::vector<std::string> args = flags.ParseOrExit(argc, argv);
  if (args.size() != 1) {
    ExitWithError(flags.program(),
                  args.empty()
                      ? "missing COMMAND (see --help)"
                      : absl::StrCat("unexpected argument '", args[1], "'"));
  }
  const std::string& command = args[0];
  if (command == "list") {  // from disk: no servers
    if (checkpoint_dir.empty()) {
      ExitWithError(flags.program(), "list needs --checkpoint_dir");
    }
    absl::StatusOr<ctl::CheckpointList> list =
        ctl::ListCheckpointDir(DefaultEnv(), checkpoint_dir, verify);
    if (!list.ok()) {
      ExitWithError(flags.program(), std::string(list.status().message()), 1);
    }
    std::fputs(list->text.c_str(), stdout);
    return list->damaged > 0 ? 1 : 0;
  }
  const std::vector<std::string> admin = {"checkpoint", "restore", "export",
                                          "import"};
  const bool is_admin =
      std::find(admin.begin(), admin.end(), command) != admin.end();
  if (command != "health" && command != "stats" && command != "plan" &&
      command != "gather" && !is_admin) {
    ExitWithError(flags.program(),
                  absl::StrCat("unknown command '", command, "'"));
  }
  const std::vector<std::string> servers =
      absl::StrSplit(servers_flag, ',', absl::SkipEmpty());
  if (command == "plan" && !spec_path.empty()) {
    auto spec = ReadSpecFile(spec_path);
    if (!spec.ok()) {
      ExitWithError(flags.program(), std::string(spec.status().message()));
    }
    return Plan(*spec);
  }
  if (servers.empty()) {
    ExitWithError(flags.program(),
                  absl::StrCat(command, " needs --servers",
                               command == "plan" ? " or --spec" : ""));
  }
  for (const std::string& address : servers) {
    absl::Status port = CheckServerAddress(address);
    if (!port.ok()) {
      ExitWithError(flags.program(),
                    absl::StrCat("--servers: ", port.message()));
    }
  }
  if (deadline_ms <= 0)
    ExitWithError(flags.program(), "--deadline_ms must be > 0");
  if (command == "export" && (heads <= 0 || out.empty())) {
    ExitWithError(flags.program(), "export needs --heads > 0 and --out");
  }
  if (command == "import" && model.empty()) {
    ExitWithError(flags.program(), "import needs --model");
  }
  if (command == "import") {  // the local file first, then the servers
    if (absl::Status s = ctl::CheckModelFile(model); !s.ok()) {
      ExitWithError(flags.program(), absl::StrCat("--model: ", s.message()));
    }
  }
  if (command == "restore" && restore_step < -1) {
    ExitWithError(flags.program(),
                  "--step must be >= 0 (or -1: the newest complete)");
  }
  if (command == "health") {
    auto creds = ClientCredentials(security);
    if (!creds.ok()) {
      ExitWithError(flags.program(), std::string(creds.status().message()));
    }
    return Health(servers, *creds);
  }

  ClientOptions options;
  options.addresses = servers;
  if (absl::Status s = ApplyClientSecurity(security, &options); !s.ok()) {
    ExitWithError(flags.program(), std::string(s.message()));
  }
  options.deadline = std::chrono::milliseconds(deadline_ms);
  options.max_attempts = 2;
  auto client = ShardClient::Connect(options);
  if (!client.ok()) {
    ExitWithError(flags.program(), std::string(client.status().message()));
  }
  if (command == "stats") return Stats(**client);
  absl::Status s = AttachToModel(**client);
  if (!s.ok()) ExitWithError(flags.program(), std::string(s.message()), 1);
  if (command == "plan") return Plan((*client)->spec());
  if (is_admin) {
    return Admin(**client, command, tag, restore_step, heads, vocab, out,
                 model);
  }

  // gather
  v1::DType dtype;
  if (dtype_name == "fp32") {
    dtype = v1::DTYPE_FP32;
  } else if (dtype_name == "bf16") {
    dtype = v1::DTYPE_BF16;
  } else if (dtype_name == "fp16") {
    dtype = v1::DTYPE_FP16;
  } else {
    ExitWithError(flags.program(), absl::StrCat("--dtype '", dtype_name,
                                                "' is not fp32, bf16 or fp16"));
  }
  if (out.empty()) ExitWithError(flags.program(), "gather needs --out");
  Range range;
  if (!tensor.empty()) {
    auto r = (*client)->TensorRange(tensor);
    if (!r.ok()) {
      ExitWithError(flags.program(), std::string(r.status().message()), 1);
    }
    range = *r;
  } else if (offset >= 0 && length > 0) {
    range = Range{static_cast<uint64_t>(offset),
                  static_cast<uint64_t>(offset + length)};
    if (range.end > (*client)->plan().total()) {
      ExitWithError(flags.program(),
                    absl::StrCat("range ends past the model's ",
                                 (*client)->plan().total(), " elements"));
    }
  } else {
    ExitWithError(flags.program(),
                  "gather needs --tensor or --offset and --length");
  }
  std::vector<char> data(range.size() * DTypeSize(dtype));
  uint64_t step = 0;
  s = (*client)->Gather(range, dtype, data.data(), &step);
  if (!s.ok()) ExitWithError(flags.program(), std::string(s.message()), 1);
  s = WriteFileAtomic(DefaultEnv(), out,
                      absl::string_view(data.data(), data.size()));
  if (!s.ok()) ExitWithError(flags.program(), std::string(s.message()), 1);
  std::printf("wrote %llu elements (%s, step %llu) to %s\n",
              static_cast<unsigned long long>(range.size()), dtype_name.c_str(),
              static_cast<unsigned long long>(step), out.c_str());
  return 0;
}

}  // namespace
}  // namespace zeroshard

int main(int argc, char** argv) {
  zeroshard::ExitIfVersionFlag(argc, argv, "zeroshard-ctl");
  return zeroshard::Main(argc, argv);
}
