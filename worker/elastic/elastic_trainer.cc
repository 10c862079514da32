#include "worker/elastic/elastic_trainer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "worker/elastic/error_class.h"
#include "worker/elastic/watched_communicator.h"
#include "worker/elastic/world.h"
#include "worker/engine/engine.h"

namespace zeroshard::elastic {
namespace {

// How often the helper thread polls ElasticSpec::stop_requested.
constexpr absl::Duration kStopPoll = absl::Milliseconds(20);

// This worker's departure from the job (ElasticSpec::stop_requested).
// While a group trains (SetTraining(true)) a helper thread Leaves the
// membership as soon as a stop is requested, so that the epoch moves on in
// the middle of a step; outside of it the caller leaves itself
// (LeaveIfRequested): a FormWorld running meanwhile would join again.
// Leave() runs under mu_, so SetTraining(false) waits for one in progress.
// Threading: the methods are for RunElastic's thread; left() for any.
class Departure {
 public:
  Departure(MembershipClient* member, std::function<bool()> stop,
            std::function<void(const std::string&)> log)
      : member_(member), stop_(std::move(stop)), log_(std::move(log)) {
    if (stop_) thread_ = std::thread([this] { Watch(); });
  }
  ~Departure() {
    {
      absl::MutexLock lock(&mu_);
      done_ = true;
    }
    if (thread_.joinable()) thread_.join();
  }
  Departure(const Departure&) = delete;
  Departure& operator=(const Departure&) = delete;

  // Whether a stop was requested (it stays requested: ElasticSpec).
  bool requested() const { return stop_ && stop_(); }
  // Whether this worker left (or tried to: see Leave).
  bool left() const { return left_.load(); }
  // The stop request, as WorldOptions::stop wants it (null without one).
  std::function<bool()> poll() {
    if (!stop_) return nullptr;
    return [this] { return requested(); };
  }

  void SetTraining(bool training) {
    absl::MutexLock lock(&mu_);
    training_ = training;
  }
  // Leaves if a stop was requested; returns whether it was.
  bool LeaveIfRequested() {
    if (!requested()) return false;
    absl::MutexLock lock(&mu_);
    Leave();
    return true;
  }

 private:
  // Once. A failed Leave RPC still ends the membership on this side
  // (MembershipClient::Leave): the lease then expires.
  void Leave() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (left_.load()) return;
    left_.store(true);
    const absl::Status status = member_->Leave();
    log_(status.ok()
             ? absl::StrCat("stop requested: left the membership "
                            "(epoch ",
                            member_->epoch(), ")")
             : absl::StrCat("stop requested; leaving the membership: ",
                            status.ToString(), " (the lease expires instead)"));
  }

  void Watch() {
    absl::MutexLock lock(&mu_);
    while (!done_ && !left_.load()) {
      mu_.AwaitWithTimeout(absl::Condition(&done_), kStopPoll);
      if (!done_ && training_ && requested()) Leave();
    }
  }

  MembershipClient* const member_;
  const std::function<bool()> stop_;
  const std::function<void(const std::string&)> log_;
  std::atomic<bool> left_{false};
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool training_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// What one group did: its outcome and where it left the engine.
struct GroupRun {
  absl::Status status;
  ErrorOrigin origin = ErrorOrigin::kGroup;  // of a failed status
  bool done = false;
  int64_t steps_committed = 0;  // by this group
  int64_t step = -1;            // the engine's global step at the end
  uint64_t epoch = 0;           // the engine's push epoch at the end
};

// Trains with `world` until the run is done, the membership moves on or
// something fails.
GroupRun TrainGroup(const train::TrainSpec& spec, World& world,
                    const engine::ElasticHooks& hooks, ShardClient* client,
                    const train::StepCallback& on_step,
                    train::TrainProgress* progress, train::TrainResult* result,
                    int64_t* first) {
  GroupRun run;
  run.epoch = hooks.min_epoch;
  std::vector<float> init;
  // This worker's own data, model and initial parameters: no peer and no
  // server involved (OpenLoader only reads the rank and size).
  if (world.rank == 0) {
    absl::StatusOr<std::vector<float>> p = train::InitialParams(spec);
    if (!p.ok()) return {p.status(), ErrorOrigin::kLocal};
    init = std::move(*p);
  }
  absl::StatusOr<std::optional<io::DataLoader>> loader =
      train::OpenLoader(spec, *world.comm);
  if (!loader.ok()) return {loader.status(), ErrorOrigin::kLocal};
  absl::StatusOr<engine::ModelDef> model = train::TrainModel(spec);
  if (!model.ok()) return {model.status(), ErrorOrigin::kLocal};
  // Tells a failed collective (a dead or mismatched peer) from the
  // servers' and the engine's own errors.
  WatchedCommunicator comm(world.comm.get());
  auto origin = [&comm] {
    return comm.failed() ? ErrorOrigin::kCollective : ErrorOrigin::kGroup;
  };
  absl::StatusOr<std::unique_ptr<engine::ZeroEngine>> engine =
      engine::ZeroEngine::Create(train::EngineOptions(spec), *model, init,
                                 &comm, client, &hooks);
  if (!engine.ok()) return {engine.status(), origin()};
  engine::ZeroEngine& e = **engine;
  const int64_t start = e.global_step();
  const uint64_t epoch = world.epoch;
  run.status = train::RunSteps(
      spec, e, loader->has_value() ? &**loader : nullptr, on_step, progress,
      result, first, [&e, epoch] { return e.world_epoch() != epoch; });
  if (!run.status.ok()) run.origin = origin();
  run.steps_committed = e.global_step() - start;
  run.step = e.global_step();
  run.epoch = e.epoch();
  if (run.status.ok() && e.global_step() >= spec.steps) {
    run.done = true;
    result->rollbacks = progress->rollbacks;
    result->params.assign(e.layout().num_params(), 0.0f);
    run.status = e.ReadParameters(absl::MakeSpan(result->params));
  }
  return run;
}

// Another member's permanent error (WorldView.failure).
absl::Status JobFailed(const std::string& failure) {
  return absl::FailedPreconditionError(
      absl::StrCat("the job failed: ", failure, "; not forming a new group"));
}

// This worker's permanent error: fails the job for every member (leaves
// the membership with the error's text) and returns the error.
absl::Status FailJob(MembershipClient* member, const absl::Status& error,
                     const std::function<void(const std::string&)>& log) {
  const std::string text =
      absl::StrCat("worker '", member->worker_name(), "': ", error.ToString());
  const absl::Status left = member->Leave(text);
  log(absl::StrCat("permanent error, the job ends on every member: ", text,
                   left.ok() ? ""
                             : absl::StrCat(" (telling the others failed: ",
                                            left.ToString(), ")")));
  return absl::Status(
      error.code(),
      absl::StrCat(error.message(), " (a permanent error: the job ends)"));
}

}  // namespace

absl::Status ValidateElasticSpec(const ElasticSpec& s) {
  if (s.min_workers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_workers ", s.min_workers, " must be at least 1"));
  }
  if (s.start_workers != 0 && s.start_workers < s.min_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("start_workers ", s.start_workers,
                     " is below min_workers ", s.min_workers));
  }
  if (s.global_micro_batches < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("global_micro_batches ", s.global_micro_batches,
                     " must be at least 1 (0: the default)"));
  }
  if (s.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("the elastic timeout must be positive");
  }
  if (s.max_failures < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_failures ", s.max_failures, " must be at least 1"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ElasticResult> RunElastic(const train::TrainSpec& spec,
                                         const ElasticSpec& elastic,
                                         MembershipClient* member,
                                         ShardClient* client,
                                         const train::StepCallback& on_step,
                                         train::TrainProgress* progress) {
  ZS_RETURN_IF_ERROR(ValidateElasticSpec(elastic));
  auto log = elastic.log ? elastic.log : [](const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  };
  const int start_workers =
      elastic.start_workers > 0 ? elastic.start_workers : elastic.min_workers;
  const int global =
      elastic.global_micro_batches > 0
          ? elastic.global_micro_batches
          : start_workers * spec.zero.gradient_accumulation_steps;
  train::TrainProgress scratch;
  if (progress == nullptr) progress = &scratch;
  ElasticResult out;
  train::TrainResult& result = out.train;
  Departure departure(member, elastic.stop_requested, log);
  // Leaves (if a stop was requested) and says whether to return `out`.
  auto leaving = [&] {
    if (!departure.LeaveIfRequested()) return false;
    out.left = true;
    return true;
  };
  // Every view FormWorld gets: the job failed (another member's permanent
  // error), or it is done already.
  int64_t done_at = -1;  // the servers' step when the job was found done
  auto check = [&](const v1::WorldView& view) -> absl::Status {
    if (!view.failure().empty()) return JobFailed(view.failure());
    if (view.step() >= static_cast<uint64_t>(spec.steps)) {
      done_at = static_cast<int64_t>(view.step());
      return absl::CancelledError("the job is done");
    }
    return absl::OkStatus();
  };
  int64_t first = -1;
  uint64_t epoch = 0;  // pushes of the next group go above this
  int failures = 0;
  bool first_group = true;
  uint64_t last_world = 0;  // the membership epoch of the last group
  while (true) {
    if (leaving()) return out;
    WorldOptions wo;
    wo.min_workers = first_group ? start_workers : elastic.min_workers;
    // Never the same group again: it changed or it failed.
    wo.min_epoch = first_group ? 0 : last_world + 1;
    wo.timeout = elastic.timeout;
    wo.comm = elastic.comm;
    wo.transport = elastic.transport;
    wo.log = log;
    wo.stop = departure.poll();
    wo.check = check;
    absl::StatusOr<World> formed = FormWorld(member, wo);
    if (leaving()) return out;
    if (done_at >= 0) {
      out.already_done = true;
      out.last_step = done_at;
      return out;
    }
    if (!formed.ok()) return formed.status();
    World& world = *formed;
    first_group = false;
    last_world = world.epoch;
    absl::StatusOr<int> gas =
        AccumulationSteps(global, world.size, elastic.policy);
    if (!gas.ok()) {
      if (!absl::IsFailedPrecondition(gas.status())) return gas.status();
      // kRefuse: wait for the membership to change.
      log(absl::StrCat("epoch ", world.epoch, ": ", gas.status().message()));
      world.comm.reset();
      const absl::Time deadline = absl::Now() + elastic.timeout;
      while (member->epoch() == world.epoch && !departure.requested()) {
        if (absl::Now() > deadline) return gas.status();
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      continue;
    }
    if (*gas * world.size != global) {
      log(absl::StrCat("epoch ", world.epoch, ": ", world.size,
                       " workers do not divide the global batch of ", global,
                       " micro-batches; batch policy rescale: ", *gas,
                       " each, ", *gas * world.size, " per step"));
    }
    train::TrainSpec group_spec = spec;
    group_spec.zero.gradient_accumulation_steps = *gas;
    engine::ElasticHooks hooks;
    // Called by the leader once per step, after its commit. Cost: one
    // Heartbeat RPC to shard 0 per step (~a round trip on the leader's
    // critical path, small next to the step's Prepare/Commit RPCs to every
    // server), so that a Leave, join or expiry ends the group at the next
    // step boundary rather than after the lease keeper's next heartbeat
    // (lease / 3). A leader that is leaving ends the group at this
    // boundary even when its Leave RPC failed.
    // The job's failure (another member's) ends the group the same way.
    hooks.world_epoch = [member, &departure, group = world.epoch] {
      if (departure.left()) return std::max(member->epoch(), group + 1);
      if (member->member_id() != 0 && !member->expired()) {
        member->Refresh().IgnoreError();  // the lease keeper reports errors
      }
      if (!member->job_failure().empty()) {
        return std::max(member->epoch(), group + 1);
      }
      return member->epoch();
    };
    hooks.min_epoch = epoch;
    departure.SetTraining(true);
    GroupRun run = TrainGroup(group_spec, world, hooks, client, on_step,
                              progress, &result, &first);
    departure.SetTraining(false);
    epoch = std::max(epoch, run.epoch);
    if (run.step >= 0) out.last_step = run.step;
    if (run.done && run.status.ok()) return out;
    if (leaving()) {
      if (!run.status.ok()) {
        log(absl::StrCat("epoch ", world.epoch, ": ", run.status.ToString(),
                         " (leaving the job)"));
      }
      return out;
    }
    if (run.status.ok()) {
      log(absl::StrCat("epoch ", world.epoch,
                       ": the membership changed; leaving the group at step ",
                       first + static_cast<int64_t>(result.stats.size())));
      failures = 0;
      continue;
    }
    if (const std::string failed = member->job_failure(); !failed.empty()) {
      return JobFailed(failed);  // another member's permanent error
    }
    // A group the membership had moved on from (this member expired, or
    // the epoch changed) may have failed for that: re-form.
    const bool superseded = member->expired() || member->epoch() != world.epoch;
    if (!superseded &&
        ClassifyError(run.status, run.origin) == ErrorKind::kPermanent) {
      return FailJob(member, run.status, log);
    }
    failures = run.steps_committed > 0 ? 1 : failures + 1;
    if (failures >= elastic.max_failures) {
      return absl::Status(run.status.code(),
                          absl::StrCat(failures,
                                       " worker groups in a row failed without "
                                       "committing a step; the last: ",
                                       run.status.message()));
    }
    log(absl::StrCat("epoch ", world.epoch, ": ", run.status.ToString(),
                     "; forming a new group"));
  }
}

}  // namespace zeroshard::elastic
