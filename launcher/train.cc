#include "launcher/train.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "client/shard_client.h"
#include "common/env/env.h"
#include "common/flags.h"
#include "common/status_macros.h"
#include "common/subprocess.h"
#include "common/version.h"
#include "fleet/local_fleet.h"
#include "launcher/log_tail.h"
#include "launcher/progress.h"
#include "launcher/report.h"
#include "launcher/server_watch.h"
#include "launcher/train_options.h"
#include "launcher/work_dir.h"
#include "worker/config/resolved_table.h"
#include "worker/elastic/error_class.h"
#include "worker/train/eval_loss.h"
#include "worker/train/run_metrics.h"

namespace zeroshard {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kGrace{3000};
const char kProg[] = "zeroshard";
// How the launcher and zeroshard-worker print a config warning.
const char kConfigWarning[] = "config warning: ";

std::atomic<int> g_signal{0};
void OnSignal(int signo) { g_signal = signo; }

// argv as a shell would take it back: words with anything but
// [A-Za-z0-9_./=:,+-] in single quotes.
std::string ShellQuote(int argc, char** argv) {
  std::vector<std::string> words;
  for (int i = 0; i < argc; ++i) {
    std::string w = argv[i];
    const bool plain = !w.empty() && w.find_first_not_of(
                                         "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghij"
                                         "klmnopqrstuvwxyz0123456789_./=:,+-"
                                         "@%") == std::string::npos;
    words.push_back(
        plain ? w : "'" + absl::StrReplaceAll(w, {{"'", "'\\''"}}) + "'");
  }
  return absl::StrJoin(words, " ");
}

// The configuration this run resolved, for report.md: a markdown table of
// the run's settings, then every DeepSpeed key with its value and source.
std::string ResolvedConfigTable(const TrainOptions& o) {
  const gpt2::Config& m = o.spec.config;
  std::string t = "| setting | value |\n|---|---|\n";
  auto row = [&t](const std::string& k, const std::string& v) {
    absl::StrAppend(&t, "| ", k, " | ", v, " |\n");
  };
  row("config", o.train.config);
  row("engine", config::DescribeEngineConfig(o.engine));
  row("model",
      absl::StrFormat("GPT-2 L=%d H=%d C=%d V=%d maxT=%d%s", m.num_layers,
                      m.num_heads, m.channels, m.vocab_size, m.max_seq_len,
                      o.train.model_file.empty()
                          ? absl::StrCat(", seeded (seed ", o.train.seed, ")")
                          : ", from " + o.train.model_file));
  row("batch", absl::StrFormat("micro-batch B=%d x T=%d, gradient "
                               "accumulation %d, %u workers (%u node%s)",
                               o.spec.zero.micro_batch, o.spec.zero.seq_len,
                               o.spec.zero.gradient_accumulation_steps,
                               o.workers, o.nodes, o.nodes > 1 ? "s" : ""));
  row("steps", absl::StrCat(o.train.steps));
  row("data", absl::StrJoin(o.data_files, ", "));
  const int64_t period = train::EvalPeriod(o.train.eval_every, o.train.steps);
  row("eval", o.train.val_data.empty()
                  ? absl::StrCat("every ", period,
                                 " steps on the first batch of the training "
                                 "data (no --val_data)")
                  : absl::StrCat("every ", period, " steps on held-out ",
                                 o.train.val_data));
  row("servers", o.num_servers > 0
                     ? absl::StrCat(o.num_servers, " started by the launcher")
                 : o.server_addresses.empty()
                     ? "none (stage 0)"
                     : absl::StrJoin(o.server_addresses, ","));
  if (!o.checkpoint_dir.empty()) {
    row("checkpoints", absl::StrCat(o.checkpoint_dir, " every ",
                                    o.spec.zero.checkpoint_interval, " steps"));
  }
  if (!o.train.save.empty()) row("save", o.train.save);
  // Every DeepSpeed key read, its value and where it came from.
  absl::StrAppend(&t, "\nThe DeepSpeed config as resolved:\n\n```\n",
                  config::RenderResolvedTable(o.engine.resolved,
                                              /*autos_only=*/false),
                  "```\n");
  return t;
}

// "SIGTERM" for SIGTERM, and so on.
std::string SignalName(int signo) {
  if (signo == SIGINT) return "SIGINT (Ctrl-C)";
  if (signo == SIGTERM) return "SIGTERM";
  return absl::StrCat("signal ", signo);
}

// Removes `path` if it is there.
void RemoveStale(Env* env, const std::string& path) {
  absl::Status s = env->RemoveFile(path);
  if (!s.ok() && !absl::IsNotFound(s)) {
    std::fprintf(stderr, "%s: %s\n", kProg, std::string(s.message()).c_str());
  }
}

// One running job: its processes, logs and progress.
class Job {
 public:
  Job(const TrainOptions& o, std::string worker_bin, RunContext context)
      : o_(o),
        worker_bin_(std::move(worker_bin)),
        context_(std::move(context)),
        progress_(stdout, isatty(STDOUT_FILENO) == 1, o.train.steps,
                  o.print_every),
        metrics_(o.work_dir + "/metrics-rank0.jsonl") {}

  int Run();

 private:
  absl::Status StartServers();
  absl::Status SpawnWorker(int rank, const std::string& coord);
  // Rank 0, then (once it has written its port) the others. A status, or
  // the exit code Poll() gave while waiting.
  absl::Status SpawnWorkers(std::optional<int>* code);
  // Whether the job can start its workers again after one failed.
  bool CanRestartWorkers() const {
    return !o_.checkpoint_dir.empty() && fleet_ != nullptr &&
           worker_restarts_ < static_cast<int>(o_.max_restarts);
  }
  // A worker failed with an error a restart would meet again (exit code
  // elastic::kExitPermanent): the job stops instead.
  bool permanent_ = false;
  // Stops the workers, keeps their logs and metrics, starts them again.
  std::optional<int> RestartWorkers(const std::vector<size_t>& failed);
  // Polls everything once; returns an exit code when the job is over.
  std::optional<int> Poll();
  void EchoLogs();
  void UpdateProgress();
  // The servers' step for the progress line: asked at most every 0.5 s,
  // or `now`.
  void RefreshServerStep(bool now);
  // After o_.stall_seconds without a step (and again every as many): says
  // so, and whether the servers answer.
  void NoteStall();
  int Fail(const std::string& what, const std::string& log);
  // Names the worker whose failure is the cause (DescribeFailedWorkers):
  // a permanent error first, then one whose log is not a peer's echo.
  int FailWorkers(const std::vector<size_t>& failed);
  void StopAll();
  // After a stop signal or a failure: the report up to the last step every
  // rank wrote, "stopped at step N of M by <stopped_by>".
  void WriteStoppedReport(const std::string& stopped_by);
  void Say(const std::string& line) { progress_.Print(line); }

  Env* const env_ = DefaultEnv();
  const TrainOptions& o_;
  const std::string worker_bin_;
  RunContext context_;
  Progress progress_;
  std::unique_ptr<LocalFleet> fleet_;
  std::unique_ptr<ShardClient> client_;
  // When rank 0 last wrote a step (or the workers started), its step, and
  // the last stall note.
  Clock::time_point last_step_at_ = Clock::now(), last_stall_note_;
  Clock::time_point stats_pause_until_;  // RefreshServerStep asks not before
  int64_t last_step_ = 0;
  std::string servers_;
  std::vector<Subprocess> workers_;
  std::vector<LogFollower> logs_;
  std::vector<bool> done_;
  std::vector<int> status_;  // wait status of each exited worker
  LogFollower metrics_;
  Clock::time_point start_ = Clock::now(), last_stats_{};
  int64_t server_step_ = -1;
  int restarts_ = 0;  // servers restarted (with --checkpoint_dir)
  int worker_restarts_ = 0;
  double tokens_ = 0;
};

absl::Status Job::StartServers() {
  std::vector<std::string> addresses = o_.server_addresses;
  if (o_.num_servers > 0) {
    auto bin = FindBinary("zeroshard-server", {".", "../server"});
    if (!bin.ok()) return bin.status();
    FleetOptions fo;
    fo.server_binary = *bin;
    fo.num_shards = o_.num_servers;
    fo.work_dir = o_.work_dir;
    fo.extra_args.push_back(absl::StrCat("--threads=", o_.server_threads));
    if (!o_.checkpoint_dir.empty()) {
      fo.extra_args.push_back("--checkpoint_dir=" + o_.checkpoint_dir);
    }
    for (const std::string& f : o_.server_flags) fo.extra_args.push_back(f);
    auto fleet = LocalFleet::Start(fo);
    if (!fleet.ok()) return fleet.status();
    fleet_ = *std::move(fleet);
    addresses = fleet_->addresses();
  }
  if (addresses.empty()) return absl::OkStatus();
  servers_ = absl::StrJoin(addresses, ",");
  ClientOptions co;
  co.addresses = addresses;
  // The launcher only asks for stats: a server that does not answer in 2 s
  // (stopped, stuck) must not hold up its loop.
  co.deadline = std::chrono::milliseconds(2000);
  co.max_attempts = 1;
  if (!fleet_) ZS_RETURN_IF_ERROR(ApplyClientSecurity(o_.train.security, &co));
  auto client = ShardClient::Connect(co);
  if (!client.ok()) return client.status();
  client_ = *std::move(client);
  Say(fleet_ ? absl::StrCat("servers started (", o_.server_threads,
                            " optimizer threads each): ", servers_)
             : absl::StrCat("servers: ", servers_));
  return absl::OkStatus();
}

absl::Status Job::SpawnWorkers(std::optional<int>* code) {
  last_step_at_ = Clock::now();
  const std::string port_file = o_.work_dir + "/rank0.port";
  RemoveStale(env_, port_file);
  for (uint32_t r = 0; r < o_.workers; ++r) {
    // The history of an earlier attempt, for the report of a continued job.
    absl::Status kept =
        KeepEarlierMetrics(o_.work_dir, static_cast<int>(r), env_);
    if (!kept.ok()) {
      std::fprintf(stderr, "%s: %s\n", kProg,
                   std::string(kept.message()).c_str());
      RemoveStale(env_,
                  absl::StrCat(o_.work_dir, "/metrics-rank", r, ".jsonl"));
    }
  }
  absl::Status s = SpawnWorker(0, "127.0.0.1:0");
  std::string port;
  while (s.ok() && port.empty() && o_.workers > 1) {
    if (*code = Poll(); code->has_value()) return absl::OkStatus();
    // The worker writes it atomically (write, then rename).
    auto text = ReadSmallFile(env_, port_file);
    if (text.ok()) port = std::string(absl::StripAsciiWhitespace(*text));
    if (port.empty())
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (uint32_t r = 1; s.ok() && r < o_.workers; ++r) {
    s = SpawnWorker(static_cast<int>(r), "127.0.0.1:" + port);
  }
  return s;
}

absl::Status Job::SpawnWorker(int r, const std::string& coord) {
  const int local = static_cast<int>(o_.workers / o_.nodes);
  SpawnOptions so;
  so.argv = {worker_bin_};
  for (std::string& f : WorkerArgs(o_, servers_)) so.argv.push_back(f);
  if (r == 0) so.argv.push_back("--port_file=" + o_.work_dir + "/rank0.port");
  so.env = {absl::StrCat("ZEROSHARD_RANK=", r),
            absl::StrCat("ZEROSHARD_WORLD_SIZE=", o_.workers),
            absl::StrCat("ZEROSHARD_LOCAL_RANK=", r % local),
            absl::StrCat("ZEROSHARD_LOCAL_SIZE=", local),
            "ZEROSHARD_COORD=" + coord};
  so.log_path = absl::StrCat(o_.work_dir, "/rank-", r, ".log");
  RemoveStale(env_, so.log_path);
  auto p = Subprocess::Spawn(so);
  if (!p.ok()) return p.status();
  workers_.push_back(*std::move(p));
  logs_.emplace_back(so.log_path);
  done_.push_back(false);
  status_.push_back(0);
  return absl::OkStatus();
}

void Job::EchoLogs() {
  for (size_t r = 0; r < logs_.size(); ++r) {
    for (const std::string& line : logs_[r].ReadNewLines()) {
      // Rank 0's per-step lines are what the progress line shows.
      if (r == 0 && absl::StartsWith(line, "step ")) continue;
      // The config's warnings were shown once, before the job started.
      if (absl::StartsWith(line, kConfigWarning) &&
          std::count(o_.config_warnings.begin(), o_.config_warnings.end(),
                     line.substr(sizeof(kConfigWarning) - 1)) > 0) {
        continue;
      }
      Say(absl::StrCat("[rank ", r, "] ", line));
    }
  }
}

void Job::RefreshServerStep(bool now) {
  // After a failed ask (a server stopped or stuck: 2 s each), none for 5 s,
  // however many step lines come: the loop must go on echoing and noting.
  if (client_ && Clock::now() >= stats_pause_until_ &&
      (now || Clock::now() - last_stats_ > std::chrono::milliseconds(500))) {
    last_stats_ = Clock::now();
    auto stats = client_->Stats();
    if (!stats.ok())
      stats_pause_until_ = Clock::now() + std::chrono::seconds(5);
    if (stats.ok() && !stats->empty()) {
      server_step_ = static_cast<int64_t>((*stats)[0].step());
    } else if (absl::IsPermissionDenied(stats.status()) ||
               absl::IsUnauthenticated(stats.status())) {
      client_.reset();  // stats need an admin token; a worker's is not one
    }
  }
}

void Job::UpdateProgress() {
  RefreshServerStep(false);
  for (const std::string& line : metrics_.ReadNewLines()) {
    if (train::JsonEvent(line) != "step") continue;
    ProgressPoint p;
    p.step = static_cast<int64_t>(train::JsonNumber(line, "step").value_or(0));
    last_step_at_ = Clock::now();
    last_step_ = p.step;
    // A line that stays on the screen shows the servers' step of now, not
    // of up to half a second ago (hundreds of steps of a small model).
    if (progress_.Keeps(p.step)) RefreshServerStep(true);
    p.loss = train::JsonNumber(line, "loss").value_or(std::nan(""));  // null
    tokens_ += train::JsonNumber(line, "tokens").value_or(0);
    const double secs =
        std::chrono::duration<double>(Clock::now() - start_).count();
    p.tokens_per_s = secs > 0 ? tokens_ / secs : 0;
    if (p.step > 0) p.eta_seconds = secs / p.step * (o_.train.steps - p.step);
    // Lines read late (a fast job) would show the servers ahead of them:
    // when rank 0 wrote step N, the servers had committed at most N.
    p.server_step = client_ ? std::min(server_step_, p.step) : -1;
    progress_.Update(p);
  }
}

void Job::NoteStall() {
  const auto now = Clock::now();
  const auto every = std::chrono::seconds(o_.stall_seconds);
  if (o_.stall_seconds <= 0 || now - last_step_at_ < every ||
      now - last_stall_note_ < every) {
    return;
  }
  last_stall_note_ = now;
  std::string servers;
  if (client_) {
    auto stats = client_->Stats();
    servers = stats.ok() ? absl::StrCat("the servers answer (at step ",
                                        (*stats)[0].step(),
                                        "), so a worker is stopped or stuck")
                         : std::string(stats.status().message());
  }
  // A stopped process (SIGSTOP, Ctrl-Z of a shell it was moved to, a
  // debugger) holds the job until it is continued: name it and the fix.
  std::vector<std::string> stopped;
  std::vector<pid_t> pids;
  for (size_t r = 0; r < workers_.size(); ++r) {
    if (!workers_[r].stopped()) continue;
    stopped.push_back(
        absl::StrCat("rank ", r, " (pid ", workers_[r].pid(), ")"));
    pids.push_back(workers_[r].pid());
  }
  for (uint32_t k = 0; fleet_ && k < o_.num_servers; ++k) {
    if (!fleet_->server(k).stopped()) continue;
    stopped.push_back(absl::StrCat("the server of shard ", k, " (pid ",
                                   fleet_->server(k).pid(), ")"));
    pids.push_back(fleet_->server(k).pid());
  }
  if (!stopped.empty()) {
    absl::StrAppend(&servers, servers.empty() ? "" : "; ",
                    absl::StrJoin(stopped, ", "),
                    stopped.size() == 1 ? " is" : " are",
                    " stopped (SIGSTOP): `kill -CONT ",
                    absl::StrJoin(pids, " "), "` resumes the job");
  }
  const auto secs =
      std::chrono::duration_cast<std::chrono::seconds>(now - last_step_at_);
  Say(absl::StrCat("no step for ", secs.count(), " s (the last was step ",
                   last_step_, ")", servers.empty() ? "" : ": ", servers,
                   "; the job waits for it (Ctrl-C stops it)"));
}

void Job::StopAll() {
  for (Subprocess& w : workers_) w.Signal(SIGTERM);
  for (Subprocess& w : workers_) w.Stop(kGrace);
  if (fleet_) (void)fleet_->Stop(kGrace);
}

void Job::WriteStoppedReport(const std::string& stopped_by) {
  RunContext c = context_;
  c.stopped_by = stopped_by;
  // Every rank's records so far, a restart's earlier attempts included.
  absl::StatusOr<std::string> summary =
      WriteRunReport(o_.work_dir, static_cast<int>(o_.workers), c);
  if (!summary.ok()) {
    std::fprintf(stderr, "%s: no report (%s)\n", kProg,
                 std::string(summary.status().message()).c_str());
    return;
  }
  std::printf(
      "\n%s\nmetrics %s/metrics.jsonl, loss curve %s/loss.svg, report "
      "%s/report.md\n",
      summary->c_str(), o_.work_dir.c_str(), o_.work_dir.c_str(),
      o_.work_dir.c_str());
  std::fflush(stdout);
}

int Job::Fail(const std::string& what, const std::string& log) {
  EchoLogs();
  progress_.Finish();
  StopAll();
  std::fprintf(stderr, "%s: %s; stopped the job. %s ends:\n%s", kProg,
               what.c_str(), log.c_str(), TailLines(log, 8).c_str());
  // The metrics, loss curve and report of the steps done, as after Ctrl-C.
  WriteStoppedReport("a failure (" + what + ")");
  if (!o_.checkpoint_dir.empty() && o_.num_servers > 0 &&
      o_.server_addresses.empty()) {
    std::fprintf(stderr,
                 "%s: the servers' checkpoints are in %s: %sthe same command "
                 "again continues the job from the newest\n",
                 kProg, o_.checkpoint_dir.c_str(),
                 permanent_ ? "the error would come again (not restarting "
                              "the workers): fix what it names, then "
                            : "");
  }
  return 1;
}

// "worker rank R (pid P) failed with ..." for the cause among `failed`:
// the first with a permanent error's exit code whose log is not an echo of
// a peer's failure, else the first permanent one, else the first that is
// not an echo, else the first; *first is it.
std::string DescribeFailedWorkers(const std::vector<size_t>& failed,
                                  const std::vector<Subprocess>& workers,
                                  const std::vector<LogFollower>& logs,
                                  const std::vector<int>& status,
                                  size_t* first_out) {
  // The cause, not its echo: a permanent error first, then a log that does
  // not end in a peer's UNAVAILABLE or in the step protocol's word of
  // another rank's failure.
  size_t first = failed[0];
  int best = -1;
  for (size_t r : failed) {
    const std::string last = TailLines(logs[r].path(), 1);
    const bool echo = absl::StrContains(last, "UNAVAILABLE") ||
                      absl::StrContains(last, "another rank's") ||
                      absl::StrContains(last, "the step leader failed");
    const int rank_of_cause =
        (WIFEXITED(status[r]) &&
                 WEXITSTATUS(status[r]) == elastic::kExitPermanent
             ? 2
             : 0) +
        (echo ? 0 : 1);
    if (rank_of_cause > best) {
      best = rank_of_cause;
      first = r;
    }
  }
  std::string also;
  for (size_t r : failed) {
    if (r != first) {
      absl::StrAppend(&also, also.empty() ? " (then " : ", ", "rank ", r,
                      " with ", DescribeWaitStatus(status[r]));
    }
  }
  if (!also.empty()) also += ")";
  *first_out = first;
  return absl::StrCat("worker rank ", first, " (pid ", workers[first].pid(),
                      ") failed with ", DescribeWaitStatus(status[first]),
                      also);
}

int Job::FailWorkers(const std::vector<size_t>& failed) {
  size_t first = 0;
  const std::string what =
      DescribeFailedWorkers(failed, workers_, logs_, status_, &first);
  return Fail(what, logs_[first].path());
}

std::optional<int> Job::RestartWorkers(const std::vector<size_t>& failed) {
  size_t first = 0;
  const std::string what =
      DescribeFailedWorkers(failed, workers_, logs_, status_, &first);
  EchoLogs();
  ++worker_restarts_;
  Say(absl::StrCat(what, "; starting the workers again (", worker_restarts_,
                   " of ", o_.max_restarts,
                   "): they continue from the servers' state"));
  for (Subprocess& w : workers_) w.Signal(SIGTERM);
  for (Subprocess& w : workers_) w.Stop(kGrace);
  EchoLogs();
  KeepAttemptLogs(logs_, o_.work_dir, worker_restarts_, env_);
  workers_.clear();
  logs_.clear();
  done_.clear();
  status_.clear();
  metrics_ = LogFollower(o_.work_dir + "/metrics-rank0.jsonl");
  std::optional<int> code;
  absl::Status s = SpawnWorkers(&code);
  if (code.has_value()) return code;
  if (!s.ok()) {
    StopAll();
    std::fprintf(stderr, "%s: %s\n", kProg, std::string(s.message()).c_str());
    return 1;
  }
  return std::nullopt;
}

std::optional<int> Job::Poll() {
  if (g_signal != 0) {
    progress_.Finish();
    std::fprintf(stderr, "%s: got %s; stopping the job\n", kProg,
                 strsignal(g_signal.load()));
    StopAll();
    WriteStoppedReport(SignalName(g_signal.load()));
    return 128 + g_signal.load();
  }
  std::vector<size_t> failed;
  for (int round = 0; round < 2; ++round) {
    for (size_t r = 0; r < workers_.size(); ++r) {
      if (done_[r]) continue;
      auto st = workers_[r].Poll();
      if (!st) continue;
      done_[r] = true;
      status_[r] = *st;
      if (!(WIFEXITED(*st) && WEXITSTATUS(*st) == 0)) failed.push_back(r);
    }
    // Peers of a failed worker fail soon after it (UNAVAILABLE); give them
    // a moment so that the one that failed first can be told apart.
    if (failed.empty()) break;
    if (round == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  if (!failed.empty()) {
    permanent_ = std::any_of(failed.begin(), failed.end(), [&](size_t r) {
      return WIFEXITED(status_[r]) &&
             WEXITSTATUS(status_[r]) == elastic::kExitPermanent;
    });
    return CanRestartWorkers() && !permanent_ ? RestartWorkers(failed)
                                              : FailWorkers(failed);
  }
  if (fleet_) {
    std::optional<ServerFailure> down = WatchServers(
        *fleet_, o_.num_servers, !o_.checkpoint_dir.empty(), o_.work_dir,
        &restarts_, [this](const std::string& line) { Say(line); });
    if (down) return Fail(down->what, down->log);
  }
  EchoLogs();
  UpdateProgress();
  NoteStall();
  for (bool d : done_) {
    if (!d) return std::nullopt;
  }
  return workers_.size() == o_.workers ? std::optional<int>(0) : std::nullopt;
}

int Job::Run() {
  std::printf(
      "zeroshard train: %u workers (%u node%s), stage %d, GPT-2 L=%d H=%d "
      "C=%d V=%d, B=%d T=%lld, %lld steps (logs in %s)\n",
      o_.workers, o_.nodes, o_.nodes > 1 ? "s" : "", o_.spec.zero.stage,
      o_.spec.config.num_layers, o_.spec.config.num_heads,
      o_.spec.config.channels, o_.spec.config.vocab_size,
      o_.spec.zero.micro_batch, static_cast<long long>(o_.train.seq_len),
      static_cast<long long>(o_.train.steps), o_.work_dir.c_str());
  std::fflush(stdout);
  absl::Status s = StartServers();
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", kProg, std::string(s.message()).c_str());
    return 1;
  }
  std::optional<int> code;
  s = SpawnWorkers(&code);
  if (code.has_value()) return *code;
  if (!s.ok()) {
    StopAll();
    std::fprintf(stderr, "%s: %s\n", kProg, std::string(s.message()).c_str());
    return 1;
  }
  while (!(code = Poll()).has_value()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (*code != 0) return *code;
  progress_.Finish();
  if (fleet_) {
    s = fleet_->Stop(kGrace);
    if (!s.ok()) {
      std::fprintf(stderr, "%s: %s\n", kProg, std::string(s.message()).c_str());
      return 1;
    }
  }
  auto summary =
      WriteRunReport(o_.work_dir, static_cast<int>(o_.workers), context_);
  if (!summary.ok() && last_step_ == 0) {
    // The workers ended well without a step: the servers' job was already
    // at --steps or past it (rank 0 said so).
    std::printf("no step was trained, so no report; %s\n",
                o_.train.save.empty()
                    ? "the servers keep the job's parameters"
                    : ("final model: " + o_.train.save).c_str());
    return 0;
  }
  if (!summary.ok()) {
    std::fprintf(stderr, "%s: report: %s\n", kProg,
                 std::string(summary.status().message()).c_str());
    return 1;
  }
  const double secs =
      std::chrono::duration<double>(Clock::now() - start_).count();
  std::printf(
      "\n%s\ntrained %lld steps in %.0f s; metrics %s/metrics.jsonl, "
      "loss curve %s/loss.svg, report %s/report.md\n",
      summary->c_str(), static_cast<long long>(o_.train.steps), secs,
      o_.work_dir.c_str(), o_.work_dir.c_str(), o_.work_dir.c_str());
  if (!o_.train.save.empty()) {
    std::printf("final model: %s\n", o_.train.save.c_str());
  }
  return 0;
}

}  // namespace

int RunTrain(int argc, char** argv) {
  auto options = ParseTrainOptions(argc, argv);
  if (!options.ok()) {
    ExitWithError(kProg, absl::StrCat("train: ", options.status().message(),
                                      " (zeroshard train --help)"));
  }
  // Every input was checked; the work dir is the first thing made.
  absl::StatusOr<std::string> worker_bin = options->worker_binary;
  if (options->worker_binary.empty()) {
    worker_bin = FindBinary("zeroshard-worker", {".", "../worker/train"});
  }
  if (!worker_bin.ok()) {
    ExitWithError(kProg, std::string(worker_bin.status().message()));
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
  const std::string advice = config::NvmeAdvice(options->engine);
  for (const std::string& w : options->config_warnings) {
    // The servers started here get the flags the advice names.
    if (!advice.empty() && absl::EndsWith(w, advice) &&
        !options->server_flags.empty()) {
      continue;
    }
    std::printf("%s%s\n", kConfigWarning, w.c_str());
  }
  if (!options->server_flags.empty()) {
    std::printf("config: the servers start with %s (from %s)\n",
                absl::StrJoin(options->server_flags, " ").c_str(),
                options->engine.zero.nvme.requested_by.c_str());
  }
  const std::string autos =
      config::RenderResolvedTable(options->engine.resolved, true);
  if (!autos.empty()) {
    std::printf("config \"auto\" values (%s):\n%s",
                options->train.config.c_str(), autos.c_str());
  }
  RunContext context;
  context.version = VersionLine(kProg);
  context.command_line = ShellQuote(argc, argv);
  context.config_table = ResolvedConfigTable(*options);
  context.planned_steps = options->train.steps;
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  Job job(*options, *worker_bin, std::move(context));
  return job.Run();
}

}  // namespace zeroshard
