// The fault campaign of issue 7: one ZeRO-3 job (tiny GPT-2, 2 in-process
// ranks, K real zeroshard-server processes checkpointing every few steps)
// run twice with the same seed, once fault-free and once under
//   - server kills: SIGKILL of a random shard at random steps, restarted on
//     its port (LocalFleet::Restart); the job rolls back to the newest
//     checkpoint every server holds;
//   - RPC faults: a few % of the calls dropped, duplicated or delayed by the
//     clients, lost (applied, answer lost), duplicated or delayed by the
//     servers;
//   - worker kills: every rank of the job dies at once after a random step
//     (InProcessHub::Kill: the collectives fail as when a worker process
//     dies) and the job is started again against the same servers, which
//     resumes at their last commit when they agree on it, else at their
//     newest checkpoint (the in-process ranks of this
//     campaign die together; one worker process killed while the others
//     go on, and a worker joining, is //worker/elastic:elastic_test);
//   - a corrupted checkpoint block: a shard is killed, one byte of its file
//     in the newest complete checkpoint is flipped, and it is restarted: it
//     must say the checkpoint "is damaged" and fall back to an older one.
// Events fire in step order, one at a time, each once the job has completed
// two steps since the previous one. Correctness in the same run: the final
// parameters must equal the fault-free run's bit for bit.
//
//   bazel run //tests:fault_campaign_bench -- [--seed=N] [--steps=120]
//
// RESULT faults_injected=<RPC faults + kills + corruptions>
//        recoveries=<roll backs during a run + job restarts>
//        steps_replayed=<steps begun - distinct steps>
//        bytes_lost=<bytes of the final parameters that differ from the
//                    fault-free run's> (the exit status is 1 unless 0)
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "client/fault_interceptor.h"
#include "common/bench/bench.h"
#include "common/env/env.h"
#include "common/fault/fault_spec.h"
#include "common/flags.h"
#include "fleet/local_fleet.h"
#include "server/checkpoint/checkpoint_files.h"
#include "worker/collective/inprocess_transport.h"
#include "worker/engine/testing.h"

namespace zeroshard::engine {
namespace {

constexpr int kWorld = 2;

struct Options {
  int64_t seed = 0;  // 0: a random seed (printed)
  int64_t steps = 120;
  uint32_t servers = 2;
  int64_t checkpoint_interval = 5;
  int64_t server_kills = 4;
  int64_t worker_kills = 2;
  double rpc_fault_rate = 0.02;  // per action and side
  int64_t timeout_seconds = 900;
};

enum class Kind { kServerKill, kCorrupt, kWorkerKill };

struct Event {
  Kind kind;
  int64_t step;  // fires once the job has completed this many steps
  uint32_t shard = 0;
  bool fired = false;
};

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kServerKill:
      return "server kill";
    case Kind::kCorrupt:
      return "corrupted checkpoint block";
    case Kind::kWorkerKill:
      return "worker kill";
  }
  return "?";
}

std::string ReadAll(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A fresh directory base/name; the test fleets put their logs in
// $TEST_TMPDIR, so it becomes that.
std::string UseFreshDir(const std::string& base, const std::string& name) {
  const std::string dir = absl::StrCat(base, "/", name);
  const std::string cmd =
      absl::StrCat("rm -rf '", dir, "' && mkdir -p '", dir, "'");
  if (std::system(cmd.c_str()) != 0) {
    std::fprintf(stderr, "cannot create %s\n", dir.c_str());
    std::exit(2);
  }
  setenv("TEST_TMPDIR", dir.c_str(), 1);
  return dir;
}

// The injections counted in the "fault injection: ..." lines of `log`.
uint64_t InjectedInLog(const std::string& log) {
  uint64_t total = 0;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    if (line.find("fault injection: ") == absl::string_view::npos) continue;
    for (const char* action : {"drop", "fail", "lose", "dup", "delay"}) {
      const std::string key = absl::StrCat(" ", action, " ");
      const size_t at = line.find(key);
      if (at == absl::string_view::npos) continue;
      total += std::strtoull(std::string(line.substr(at + key.size())).c_str(),
                             nullptr, 10);
    }
  }
  return total;
}

train::TrainSpec CampaignSpec(const Options& o) {
  train::TrainSpec spec = TinySpec(3, false, "fault-campaign");
  spec.steps = static_cast<int>(o.steps);
  spec.zero.checkpoint_interval = static_cast<int>(o.checkpoint_interval);
  spec.zero.recovery_timeout_seconds = 60;
  return spec;
}

// The schedule: distinct steps in [8, steps - 20], in step order.
std::vector<Event> Schedule(const Options& o, std::mt19937_64& rng) {
  std::vector<Event> events;
  std::vector<int64_t> used;
  const int64_t lo = 8, hi = std::max<int64_t>(lo + 1, o.steps - 20);
  auto pick = [&] {
    while (true) {
      const int64_t s = lo + static_cast<int64_t>(rng() % (hi - lo));
      if (std::find(used.begin(), used.end(), s) == used.end() ||
          static_cast<int64_t>(used.size()) >= hi - lo) {
        used.push_back(s);
        return s;
      }
    }
  };
  for (int64_t i = 0; i < o.server_kills; ++i) {
    events.push_back(
        {Kind::kServerKill, pick(), static_cast<uint32_t>(rng() % o.servers)});
  }
  events.push_back(
      {Kind::kCorrupt, pick(), static_cast<uint32_t>(rng() % o.servers)});
  for (int64_t i = 0; i < o.worker_kills; ++i) {
    events.push_back({Kind::kWorkerKill, pick()});
  }
  std::sort(events.begin(), events.end(),
            [](const Event& a, const Event& b) { return a.step < b.step; });
  return events;
}

// The events in order: rank 0's steps move `step`; the controller thread
// carries out the server events and rank 0 the worker kills.
class Campaign {
 public:
  explicit Campaign(std::vector<Event> events) : events_(std::move(events)) {}

  // Rank 0 completed a step; true when the job must die now.
  bool OnStep(int64_t step) {
    absl::MutexLock lock(&mu_);
    step_ = step;
    ++reports_;
    if (!DueLocked() || events_[next_].kind != Kind::kWorkerKill) {
      return false;
    }
    FiredLocked();
    return true;
  }

  // Blocks until a server event is due (returns it) or the campaign ends
  // (nullptr).
  Event* NextServerEvent() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](Campaign* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu_) {
          return c->done_ || (c->DueLocked() &&
                              c->events_[c->next_].kind != Kind::kWorkerKill);
        },
        this));
    return done_ ? nullptr : &events_[next_];
  }
  void ServerEventDone() {
    absl::MutexLock lock(&mu_);
    FiredLocked();
  }
  void Finish() {
    absl::MutexLock lock(&mu_);
    done_ = true;
  }
  int64_t step() {
    absl::MutexLock lock(&mu_);
    return step_;
  }
  const std::vector<Event>& events() const { return events_; }

 private:
  bool DueLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return next_ < events_.size() && reports_ >= 2 &&
           step_ >= events_[next_].step;
  }
  void FiredLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    events_[next_].fired = true;
    ++next_;
    reports_ = 0;
  }

  absl::Mutex mu_;
  std::vector<Event> events_;  // fields other than `fired` are constant
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t step_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t reports_ ABSL_GUARDED_BY(mu_) = 0;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

// Carries out the server events of `campaign` on `fleet` until it ends.
// Returns false if a step of it failed (printed).
bool RunServerEvents(Campaign* campaign, LocalFleet* fleet,
                     ShardClient* watcher, const std::string& work_dir,
                     const std::string& ckpt_dir, uint32_t num_servers) {
  int restarts = 0;  // LocalFleet numbers its restart logs from 1
  bool ok = true;
  while (Event* e = campaign->NextServerEvent()) {
    const uint32_t k = e->shard;
    const int64_t at = campaign->step();
    std::string corrupted;
    if (e->kind == Kind::kCorrupt) {
      fleet->server(k).Signal(SIGKILL);
      fleet->server(k).Stop(std::chrono::milliseconds(0));
      auto listing = checkpoint::ListCheckpoints(DefaultEnv(), ckpt_dir);
      if (!listing.ok() || listing->complete.empty()) {
        std::printf(
            "fault: corruption: no complete checkpoint (%s)\n",
            listing.ok() ? "none" : listing.status().ToString().c_str());
        ok = false;
      } else {
        const uint64_t step = listing->complete[0].step();
        corrupted = checkpoint::StepDirName(step);
        const std::string file =
            absl::StrCat(ckpt_dir, "/", corrupted, "/",
                         checkpoint::ShardFileName(k, num_servers));
        if (!FlipByteNearEnd(file)) {
          std::printf("fault: cannot flip a byte of %s\n", file.c_str());
          ok = false;
        }
      }
    }
    const absl::Status restarted = fleet->Restart(k);
    ++restarts;
    if (!restarted.ok()) {
      std::printf("fault: restart of shard %u failed: %s\n", k,
                  restarted.ToString().c_str());
      campaign->ServerEventDone();
      ok = false;
      continue;
    }
    uint64_t restored = 0;
    if (auto stats = watcher->Stats(); stats.ok()) {
      restored = (*stats)[k].restored_step();
    }
    if (e->kind == Kind::kServerKill) {
      std::printf(
          "fault: SIGKILL shard %u at job step %lld; restarted, it restored "
          "step %llu\n",
          k, static_cast<long long>(at),
          static_cast<unsigned long long>(restored));
    } else {
      const std::string log = ReadAll(
          absl::StrCat(work_dir, "/server-", k, ".restart-", restarts, ".log"));
      const bool damaged =
          !corrupted.empty() &&
          log.find(absl::StrCat("checkpoint ", corrupted, " is damaged")) !=
              std::string::npos;
      std::printf(
          "fault: SIGKILL shard %u at job step %lld, one byte of its file in "
          "%s flipped, restarted: its log says %s; it restored step %llu\n",
          k, static_cast<long long>(at), corrupted.c_str(),
          damaged ? "\"is damaged\"" : "NOTHING about the damage",
          static_cast<unsigned long long>(restored));
      if (!damaged) ok = false;
    }
    campaign->ServerEventDone();
  }
  return ok;
}

int Main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IONBF, 0);
  Options o;
  FlagSet flags("fault_campaign_bench",
                "Runs a ZeRO-3 job fault-free, then under a fault campaign, "
                "and compares the final parameters bit for bit.");
  flags.Int64("seed", &o.seed, "campaign seed (0: random, printed)");
  flags.Int64("steps", &o.steps, "optimizer steps of the job");
  flags.Uint32("servers", &o.servers, "shard servers (K)");
  flags.Int64("checkpoint_interval", &o.checkpoint_interval,
              "steps between checkpoints");
  flags.Int64("server_kills", &o.server_kills, "server SIGKILLs");
  flags.Int64("worker_kills", &o.worker_kills,
              "worker kills (job restarts from checkpoint)");
  flags.Double("rpc_fault_rate", &o.rpc_fault_rate,
               "probability of each RPC fault kind on each side");
  flags.Int64("timeout_seconds", &o.timeout_seconds,
              "give up (exit 1) after this long: a hang");
  flags.ParseOrExit(argc, argv);
  if (o.seed == 0) o.seed = static_cast<int64_t>(std::random_device()() | 1);
  std::thread([t = o.timeout_seconds] {
    std::this_thread::sleep_for(std::chrono::seconds(t));
    std::printf("fault campaign: no end after %lld s: a hang\n",
                static_cast<long long>(t));
    std::_Exit(1);
  }).detach();

  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string base =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/zeroshard-fault-campaign");
  const train::TrainSpec spec = CampaignSpec(o);
  std::printf(
      "fault campaign: seed %lld; GPT-2 L=2 C=32, ZeRO-3, %d ranks, %u "
      "servers, %lld steps, checkpoint every %lld; logs in %s\n",
      static_cast<long long>(o.seed), kWorld, o.servers,
      static_cast<long long>(o.steps),
      static_cast<long long>(o.checkpoint_interval), base.c_str());

  // 1. The fault-free reference.
  std::vector<float> reference;
  {
    const std::string dir = UseFreshDir(base, "reference");
    auto fleet = StartTestFleet(
        o.servers, {absl::StrCat("--checkpoint_dir=", dir, "/ckpt")});
    if (!fleet.ok()) {
      std::printf("reference: %s\n", fleet.status().ToString().c_str());
      return 1;
    }
    const auto start = std::chrono::steady_clock::now();
    auto results = RunInProcessOn(spec, kWorld, fleet->get());
    if (!results.ok()) {
      std::printf("reference run failed: %s\n",
                  results.status().ToString().c_str());
      return 1;
    }
    reference = (*results)[0].params;
    std::printf(
        "reference: %lld steps fault-free in %.1f s\n",
        static_cast<long long>(o.steps),
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count());
  }

  // 2. The campaign.
  std::mt19937_64 rng(static_cast<uint64_t>(o.seed));
  Campaign campaign(Schedule(o, rng));
  std::printf("schedule:");
  for (const Event& e : campaign.events()) {
    std::printf(" %s%s@%lld", KindName(e.kind),
                e.kind == Kind::kWorkerKill
                    ? ""
                    : absl::StrCat("(shard ", e.shard, ")").c_str(),
                static_cast<long long>(e.step));
  }
  std::printf("\n");
  const double p = o.rpc_fault_rate;
  const std::string client_faults = absl::StrCat(
      "seed=", o.seed, ",drop=", p, ",dup=", p, ",delay=", p, ":5ms");
  const std::string server_faults = absl::StrCat(
      "seed=", o.seed + 1, ",lose=", p, ",dup=", p, ",delay=", p, ":2ms");
  std::printf("RPC faults: clients %s; servers %s\n", client_faults.c_str(),
              server_faults.c_str());
  auto client_spec = fault::ParseFaultSpec(client_faults, fault::Side::kWorker);
  if (!client_spec.ok()) {
    std::printf("%s\n", client_spec.status().ToString().c_str());
    return 2;
  }
  auto injector = std::make_shared<fault::FaultInjector>(*client_spec);

  const std::string dir = UseFreshDir(base, "campaign");
  const std::string ckpt_dir = dir + "/ckpt";
  auto fleet =
      StartTestFleet(o.servers, {absl::StrCat("--checkpoint_dir=", ckpt_dir),
                                 absl::StrCat("--fault_spec=", server_faults)});
  if (!fleet.ok()) {
    std::printf("campaign fleet: %s\n", fleet.status().ToString().c_str());
    return 1;
  }
  ClientOptions wo;
  wo.addresses = (*fleet)->addresses();
  auto watcher = ShardClient::Connect(wo);
  if (!watcher.ok()) {
    std::printf("watcher: %s\n", watcher.status().ToString().c_str());
    return 1;
  }
  bool events_ok = true;
  std::thread controller([&] {
    events_ok = RunServerEvents(&campaign, fleet->get(), watcher->get(), dir,
                                ckpt_dir, o.servers);
  });

  InProcessHooks hooks;
  hooks.client_options = [&](int, ClientOptions* co) {
    AddClientFaultInjection(injector, co);
  };
  std::atomic<bool> killed{false};
  hooks.on_step = [&](int rank, const StepStats& s,
                      collective::InProcessHub* hub) {
    if (rank != 0 || !campaign.OnStep(s.step)) return;
    std::printf("fault: worker kill: every rank dies after step %lld\n",
                static_cast<long long>(s.step));
    killed = true;
    for (int r = 0; r < kWorld; ++r) hub->Kill(r);
  };
  std::vector<train::TrainProgress> progress;
  hooks.progress = &progress;
  int64_t steps_run = 0;
  int rollbacks = 0, job_restarts = 0;
  absl::StatusOr<std::vector<train::TrainResult>> results;
  const auto start = std::chrono::steady_clock::now();
  for (int segment = 0;; ++segment) {
    killed = false;
    results = RunInProcessWith(spec, kWorld, fleet->get(), hooks);
    steps_run += progress[0].steps_run;
    // A restarted job's resume at start is its first roll back.
    rollbacks += std::max(0, progress[0].rollbacks - (segment > 0 ? 1 : 0));
    if (results.ok() || !killed) break;
    ++job_restarts;
    std::printf(
        "recovery: job restarted (the servers hold its checkpoints; "
        "%lld steps begun, %d roll backs in the run that died)\n",
        static_cast<long long>(progress[0].steps_run), progress[0].rollbacks);
  }
  campaign.Finish();
  controller.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  // A failed run has lost every byte (its parameters are not compared).
  std::vector<float> got;
  if (results.ok()) {
    got = std::move((*results)[0].params);
  } else {
    std::printf("campaign run failed: %s\n",
                results.status().ToString().c_str());
  }
  const absl::Status stopped = (*fleet)->Stop(std::chrono::seconds(10));
  if (!stopped.ok())
    std::printf("fleet stop: %s\n", stopped.ToString().c_str());

  // 3. Counts and the comparison.
  int server_kills = 0, worker_kills = 0, corruptions = 0, not_fired = 0;
  for (const Event& e : campaign.events()) {
    if (!e.fired) {
      ++not_fired;
    } else if (e.kind == Kind::kServerKill) {
      ++server_kills;
    } else if (e.kind == Kind::kWorkerKill) {
      ++worker_kills;
    } else {
      ++corruptions;
    }
  }
  const fault::FaultInjector::Counts c = injector->counts();
  const uint64_t client_injected = c.drop + c.fail + c.lose + c.dup + c.delay;
  uint64_t server_injected = 0;
  for (uint32_t k = 0; k < o.servers; ++k) {
    server_injected +=
        InjectedInLog(ReadAll(absl::StrCat(dir, "/server-", k, ".log")));
  }
  for (int n = 1; n <= server_kills + corruptions; ++n) {
    for (uint32_t k = 0; k < o.servers; ++k) {
      server_injected += InjectedInLog(
          ReadAll(absl::StrCat(dir, "/server-", k, ".restart-", n, ".log")));
    }
  }
  uint64_t bytes_lost = 0;
  if (got.size() != reference.size()) {
    bytes_lost = sizeof(float) * std::max(got.size(), reference.size());
  } else {
    for (size_t i = 0; i < got.size(); ++i) {
      if (std::memcmp(&got[i], &reference[i], sizeof(float)) != 0) {
        bytes_lost += sizeof(float);
      }
    }
  }
  const int64_t steps_replayed = steps_run - o.steps;
  std::printf(
      "client RPC faults: %s\n"
      "server RPC faults: %llu (only servers that exited normally report "
      "theirs; a SIGKILLed one cannot)\n"
      "kills: %d server; %d worker, each answered by a job restart from the "
      "servers' last commit or newest checkpoint (not elastically: "
      "membership is fixed); "
      "%d corrupted checkpoint block; %d scheduled events not reached\n"
      "campaign run: %.1f s, %lld steps begun for %lld steps, %d roll backs "
      "during runs, %d job restarts; final parameters %s the fault-free "
      "run's (%zu floats)\n",
      injector->Summary().c_str(),
      static_cast<unsigned long long>(server_injected), server_kills,
      worker_kills, corruptions, not_fired, seconds,
      static_cast<long long>(steps_run), static_cast<long long>(o.steps),
      rollbacks, job_restarts,
      !results.ok()     ? "LOST (the run failed), not compared with"
      : bytes_lost == 0 ? "equal"
                        : "DIFFER FROM",
      reference.size());
  if (!events_ok) std::printf("a server event failed (above)\n");
  bench::ResultLine()
      .AddInt("faults_injected",
              static_cast<int64_t>(client_injected + server_injected) +
                  server_kills + worker_kills + corruptions)
      .AddInt("recoveries", rollbacks + job_restarts)
      .AddInt("steps_replayed", steps_replayed)
      .AddInt("bytes_lost", static_cast<int64_t>(bytes_lost))
      .Print();
  return bytes_lost == 0 && events_ok ? 0 : 1;
}

}  // namespace
}  // namespace zeroshard::engine

int main(int argc, char** argv) { return zeroshard::engine::Main(argc, argv); }
