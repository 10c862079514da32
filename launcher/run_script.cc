#include "launcher/run_script.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/env/env.h"
#include "common/env/files.h"
#include "common/flags.h"
#include "common/hostname.h"
#include "common/quiet_port.h"
#include "common/status_macros.h"
#include "common/subprocess.h"
#include "fleet/local_fleet.h"
#include "launcher/log_tail.h"
#include "launcher/server_watch.h"
#include "launcher/train_options.h"
#include "launcher/work_dir.h"

namespace zeroshard {
namespace {

constexpr std::chrono::milliseconds kGrace{3000};
const char kProg[] = "zeroshard run";
constexpr uint32_t kMaxWorkers = 1024;

std::atomic<int> g_signal{0};
void OnSignal(int signo) { g_signal = signo; }

absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError(message);
}

// The launcher's flags that take a value (as "--name value" or
// "--name=value"): where the program's own arguments start depends on it.
const std::set<std::string>& ValueFlags() {
  static const auto* names = new std::set<std::string>{
      "workers",  "servers", "server_addrs", "server_threads", "checkpoint_dir",
      "work_dir", "job_id",  "python",       "max_restarts"};
  return *names;
}

// Index of the program's first argument in argv (argc when none); *dashes
// is set when "--" separated them.
int ProgramStart(int argc, char** argv, bool* dashes) {
  *dashes = false;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") {
      *dashes = true;
      return i;
    }
    if (arg.size() < 2 || arg[0] != '-') return i;
    std::string name =
        absl::StrReplaceAll(arg.substr(arg[1] == '-' ? 2 : 1), {{"-", "_"}});
    if (name.find('=') == std::string::npos && ValueFlags().count(name) > 0) {
      ++i;  // its value
    }
  }
  return argc;
}

// One run of the program on every rank, with its servers.
class ScriptJob {
 public:
  explicit ScriptJob(const RunOptions& o, std::vector<std::string> argv)
      : o_(o), argv_(std::move(argv)) {}
  int Run();

 private:
  absl::Status StartServers();
  absl::Status SpawnRanks();
  std::optional<int> Poll();
  void EchoLogs();
  int Fail(const std::string& what, const std::string& log);
  void StopAll();

  const RunOptions& o_;
  const std::vector<std::string> argv_;
  std::unique_ptr<LocalFleet> fleet_;
  std::string servers_;
  std::vector<Subprocess> ranks_;
  std::vector<LogFollower> logs_;
  std::vector<bool> done_;
  int restarts_ = 0;       // servers restarted
  int rank_restarts_ = 0;  // times every rank started again
};

absl::Status ScriptJob::StartServers() {
  if (!o_.server_addrs.empty()) {
    servers_ = o_.server_addrs;
    return absl::OkStatus();
  }
  if (o_.servers == 0) return absl::OkStatus();
  ZS_ASSIGN_OR_RETURN(std::string bin,
                      FindBinary("zeroshard-server", {".", "../server"}));
  FleetOptions fo;
  fo.server_binary = bin;
  fo.num_shards = o_.servers;
  fo.work_dir = o_.work_dir;
  const uint32_t threads =
      o_.server_threads > 0
          ? o_.server_threads
          : AutoServerThreads(o_.servers, std::thread::hardware_concurrency());
  fo.extra_args.push_back(absl::StrCat("--threads=", threads));
  if (!o_.checkpoint_dir.empty()) {
    fo.extra_args.push_back("--checkpoint_dir=" + o_.checkpoint_dir);
  }
  ZS_ASSIGN_OR_RETURN(fleet_, LocalFleet::Start(fo));
  servers_ = absl::StrJoin(fleet_->addresses(), ",");
  std::printf("%s: servers started (%u optimizer threads each): %s\n", kProg,
              threads, servers_.c_str());
  return absl::OkStatus();
}

absl::Status ScriptJob::SpawnRanks() {
  ZS_ASSIGN_OR_RETURN(const int port, QuietPort());
  std::vector<std::string> common = {
      absl::StrCat("WORLD_SIZE=", o_.workers),
      absl::StrCat("LOCAL_WORLD_SIZE=", o_.workers), "MASTER_ADDR=127.0.0.1",
      absl::StrCat("MASTER_PORT=", port)};
  if (!servers_.empty()) common.push_back("ZEROSHARD_SERVERS=" + servers_);
  if (!o_.job_id.empty()) common.push_back("ZEROSHARD_JOB_ID=" + o_.job_id);
  if (std::getenv("ZEROSHARD_LIB") == nullptr) {
    for (const char* dir : {".", "../client", "../lib"}) {
      const std::string lib =
          absl::StrCat(SelfDirectory(), "/", dir, "/libzeroshard.so");
      if (access(lib.c_str(), R_OK) == 0) {
        common.push_back("ZEROSHARD_LIB=" + lib);
        break;
      }
    }
  }
  for (uint32_t r = 0; r < o_.workers; ++r) {
    SpawnOptions so;
    so.argv = argv_;
    so.env = common;
    so.env.push_back(absl::StrCat("RANK=", r));
    so.env.push_back(absl::StrCat("LOCAL_RANK=", r));
    so.log_path = absl::StrCat(o_.work_dir, "/rank-", r, ".log");
    absl::Status removed = DefaultEnv()->RemoveFile(so.log_path);
    if (!removed.ok() && !absl::IsNotFound(removed)) return removed;
    ZS_ASSIGN_OR_RETURN(Subprocess p, Subprocess::Spawn(so));
    ranks_.push_back(std::move(p));
    logs_.emplace_back(so.log_path);
    done_.push_back(false);
  }
  return absl::OkStatus();
}

void ScriptJob::EchoLogs() {
  for (size_t r = 0; r < logs_.size(); ++r) {
    // A rank that has exited wrote its whole log: its last line may lack
    // the newline (print(..., end="")).
    for (const std::string& line : logs_[r].ReadNewLines(done_[r])) {
      if (o_.workers == 1) {
        std::printf("%s\n", line.c_str());
      } else {
        std::printf("[rank %zu] %s\n", r, line.c_str());
      }
    }
  }
  std::fflush(stdout);
}

void ScriptJob::StopAll() {
  for (Subprocess& p : ranks_) p.Signal(SIGTERM);
  for (Subprocess& p : ranks_) p.Stop(kGrace);
  if (fleet_) (void)fleet_->Stop(kGrace);
}

int ScriptJob::Fail(const std::string& what, const std::string& log) {
  EchoLogs();
  StopAll();
  std::fprintf(stderr, "%s: %s; stopped the job. %s ends:\n%s", kProg,
               what.c_str(), log.c_str(), TailLines(log, 8).c_str());
  if (!o_.checkpoint_dir.empty()) {
    std::fprintf(stderr,
                 "%s: the servers' checkpoints are in %s: the same command "
                 "again starts them from the newest, where the program "
                 "continues with recovery on (zeroshard.checkpoint_interval) "
                 "or by loading one (engine.load_checkpoint)\n",
                 kProg, o_.checkpoint_dir.c_str());
  }
  return 1;
}

std::optional<int> ScriptJob::Poll() {
  if (g_signal != 0) {
    EchoLogs();
    std::fprintf(stderr, "%s: got %s; stopping the job\n", kProg,
                 strsignal(g_signal.load()));
    StopAll();
    return 128 + g_signal.load();
  }
  std::optional<size_t> failed;
  int status = 0;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    if (done_[r]) continue;
    auto st = ranks_[r].Poll();
    if (!st) continue;
    done_[r] = true;
    if (!(WIFEXITED(*st) && WEXITSTATUS(*st) == 0) && !failed) {
      failed = r;
      status = *st;
    }
  }
  if (failed) {
    const std::string what =
        absl::StrCat("rank ", *failed, " (pid ", ranks_[*failed].pid(),
                     ") failed with ", DescribeWaitStatus(status));
    if (rank_restarts_ >= static_cast<int>(o_.max_restarts)) {
      return Fail(what, logs_[*failed].path());
    }
    ++rank_restarts_;
    EchoLogs();
    std::printf("%s: %s; starting every rank again (%d of %u)\n", kProg,
                what.c_str(), rank_restarts_, o_.max_restarts);
    for (Subprocess& p : ranks_) p.Signal(SIGTERM);
    for (Subprocess& p : ranks_) p.Stop(kGrace);
    EchoLogs();
    KeepAttemptLogs(logs_, o_.work_dir, rank_restarts_);
    ranks_.clear();
    logs_.clear();
    done_.clear();
    absl::Status s = SpawnRanks();
    if (!s.ok()) {
      return Fail(std::string(s.message()), o_.work_dir + "/rank-0.log");
    }
    return std::nullopt;
  }
  if (fleet_) {
    std::optional<ServerFailure> down =
        WatchServers(*fleet_, o_.servers, !o_.checkpoint_dir.empty(),
                     o_.work_dir, &restarts_, [](const std::string& line) {
                       std::printf("%s: %s\n", kProg, line.c_str());
                     });
    if (down) return Fail(down->what, down->log);
  }
  EchoLogs();
  for (bool d : done_) {
    if (!d) return std::nullopt;
  }
  return 0;
}

int ScriptJob::Run() {
  absl::Status s = StartServers();
  if (s.ok()) s = SpawnRanks();
  if (!s.ok()) {
    StopAll();
    std::fprintf(stderr, "%s: %s\n", kProg, std::string(s.message()).c_str());
    return 1;
  }
  std::optional<int> code;
  while (!(code = Poll()).has_value()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (*code == 0 && fleet_) {
    s = fleet_->Stop(kGrace);
    if (!s.ok()) {
      std::fprintf(stderr, "%s: %s\n", kProg, std::string(s.message()).c_str());
      return 1;
    }
  }
  return *code;
}

}  // namespace

absl::StatusOr<RunOptions> ParseRunOptions(int argc, char** argv) {
  RunOptions o;
  FlagSet flags(
      "zeroshard run",
      "zeroshard run [flags] [--] PROGRAM [ARGS...]\n\n"
      "Runs PROGRAM (a training script calling zeroshard.initialize, or a\n"
      "program using the C API) on --workers ranks of this machine with\n"
      "torchrun's environment, after starting --servers shard servers on\n"
      "loopback, whose addresses it gets in ZEROSHARD_SERVERS. A PROGRAM\n"
      "ending in .py runs under --python -u. Each rank's output goes to\n"
      "--work_dir/rank-<r>.log and is echoed here. Flags may be spelled\n"
      "with '-' or '_'.");
  flags.Uint32("workers", &o.workers, "ranks W (processes of PROGRAM)");
  flags.Uint32("servers", &o.servers, "shard servers to start");
  AddServerFlags(&flags, &o.server_addrs, &o.server_threads);
  flags.String("checkpoint_dir", &o.checkpoint_dir,
               "the servers' --checkpoint_dir: they checkpoint there when "
               "the program asks (save_checkpoint), a server that dies is "
               "restarted from its newest checkpoint, and a run started "
               "again with it resumes there");
  flags.Uint32("max_restarts", &o.max_restarts,
               "times every rank starts again after one fails (torchrun's; "
               "the program must continue on its own: recovery on, or "
               "load_checkpoint)");
  flags.String("work_dir", &o.work_dir, "server and rank logs go here");
  flags.String("job_id", &o.job_id,
               "ZEROSHARD_JOB_ID for the program (its default otherwise)");
  flags.String("python", &o.python,
               "the interpreter of a .py PROGRAM (a name in PATH or a path; "
               "e.g. /usr/bin/python3 for Debian's torch)");
  // What torchrun's and DeepSpeed's launchers call these.
  AddWorkerCountHints(&flags);
  for (const char* name : {"nnodes", "num_nodes", "node_rank", "hostfile",
                           "master_addr", "rdzv_endpoint"}) {
    flags.Foreign(name,
                  "zeroshard run starts the ranks of this machine: on "
                  "several, start the script with torchrun on each and give "
                  "every rank the same servers in ZEROSHARD_SERVERS");
  }
  flags.Foreign("master_port", "zeroshard run picks a free MASTER_PORT");
  bool dashes = false;
  const int start = ProgramStart(argc, argv, &dashes);
  auto rest = flags.Parse(start, argv, 2);
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    std::exit(0);
  }
  if (!rest.ok()) return rest.status();
  if (!rest->empty()) {
    return Invalid(absl::StrCat("unexpected argument '", (*rest)[0], "'"));
  }
  for (int i = start + (dashes ? 1 : 0); i < argc; ++i) {
    o.program.push_back(argv[i]);
  }
  if (o.program.empty()) {
    return Invalid(
        "no program to run: zeroshard run [flags] [--] PROGRAM "
        "[ARGS...]");
  }
  if (o.workers < 1 || o.workers > kMaxWorkers) {
    return Invalid(absl::StrCat("--workers must be in [1, ", kMaxWorkers,
                                "], got ", o.workers));
  }
  if (!o.server_addrs.empty()) {
    if (flags.WasSet("servers") && o.servers > 0) {
      return Invalid(
          "give --servers (start them) or --server_addrs (use them), not "
          "both");
    }
    if (!o.checkpoint_dir.empty()) {
      return Invalid(
          "--checkpoint_dir is for the servers the launcher "
          "starts; start yours with zeroshard-server "
          "--checkpoint_dir");
    }
    o.servers = 0;
    for (absl::string_view a :
         absl::StrSplit(o.server_addrs, ',', absl::SkipEmpty())) {
      ZS_RETURN_IF_ERROR(CheckServerAddress(a));
    }
  }
  if (o.servers == 0 && !o.checkpoint_dir.empty()) {
    return Invalid("--checkpoint_dir needs servers to start (--servers)");
  }
  return o;
}

absl::StatusOr<std::vector<std::string>> ResolveProgram(
    const std::vector<std::string>& program, const std::string& python,
    const std::string& path) {
  std::vector<std::string> argv = program;
  auto find = [&path](const std::string& name) -> absl::StatusOr<std::string> {
    if (name.find('/') != std::string::npos) {
      if (access(name.c_str(), F_OK) != 0) {
        return absl::NotFoundError(absl::StrCat(name, " does not exist"));
      }
      return name;
    }
    for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
      const std::string candidate = absl::StrCat(dir, "/", name);
      if (access(candidate.c_str(), X_OK) == 0) return candidate;
    }
    return absl::NotFoundError(
        absl::StrCat(name, " is not an executable in PATH (", path, ")"));
  };
  if (absl::EndsWith(argv[0], ".py")) {
    const std::string script =
        argv[0].find('/') == std::string::npos ? "./" + argv[0] : argv[0];
    if (access(script.c_str(), R_OK) != 0) {
      return absl::NotFoundError(absl::StrCat(
          "the script ", argv[0], " cannot be read: ", strerror(errno)));
    }
    ZS_ASSIGN_OR_RETURN(std::string interpreter, find(python));
    argv[0] = script;
    argv.insert(argv.begin(), {interpreter, "-u"});
    return argv;
  }
  ZS_ASSIGN_OR_RETURN(argv[0], find(argv[0]));
  if (access(argv[0].c_str(), X_OK) != 0) {
    return absl::NotFoundError(
        absl::StrCat(argv[0], " is not executable: ", strerror(errno)));
  }
  return argv;
}

int RunScript(int argc, char** argv) {
  auto options = ParseRunOptions(argc, argv);
  if (!options.ok()) {
    ExitWithError(kProg, absl::StrCat(options.status().message(),
                                      " (zeroshard run --help)"));
  }
  const char* path = std::getenv("PATH");
  auto program = ResolveProgram(options->program, options->python,
                                path != nullptr ? path : "/usr/bin:/bin");
  if (!program.ok()) {
    ExitWithError(kProg, std::string(program.status().message()));
  }
  absl::Status dir = MakeWritableDir(DefaultEnv(), options->work_dir);
  if (!dir.ok()) {
    ExitWithError(
        kProg, absl::StrCat("--work_dir ", options->work_dir,
                            " is not a writable directory: ", dir.message()));
  }
  // One run per work dir, held to the end (work_dir.h).
  absl::StatusOr<std::unique_ptr<FileLock>> work_lock =
      LockWorkDir(DefaultEnv(), options->work_dir);
  if (!work_lock.ok()) {
    ExitWithError(kProg, std::string(work_lock.status().message()));
  }
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  ScriptJob job(*options, *std::move(program));
  return job.Run();
}

}  // namespace zeroshard
