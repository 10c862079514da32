#include "client/step_protocol.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace zeroshard {
namespace {

// Outcome codes beyond absl's status codes in the leader's word.
constexpr uint64_t kRolledBack = 1000, kHealthy = 1001, kContinued = 1002;

// The leader's outcome as raw bits: code, the workers' state to move to,
// the epoch of that move, the leader's membership epoch.
struct OutcomeWord {
  uint64_t code, step, updates, data_epoch, data_shard, data_offset, epoch,
      seed;
  double loss_scale;
  int64_t scale_hysteresis, scale_iteration, scale_last_overflow;
  uint64_t world;
};

void StateToWord(const v1::TrainerState& s, OutcomeWord* w) {
  w->step = s.step();
  w->updates = s.updates();
  w->data_epoch = static_cast<uint64_t>(s.data_epoch());
  w->data_shard = static_cast<uint64_t>(s.data_shard());
  w->data_offset = static_cast<uint64_t>(s.data_offset());
  w->seed = s.seed();
  w->loss_scale = s.loss_scale();
  w->scale_hysteresis = s.loss_scale_hysteresis();
  w->scale_iteration = s.loss_scale_iteration();
  w->scale_last_overflow = s.loss_scale_last_overflow();
}

v1::TrainerState StateOfWord(const OutcomeWord& w) {
  v1::TrainerState s;
  s.set_step(w.step);
  s.set_updates(w.updates);
  s.set_data_epoch(static_cast<int64_t>(w.data_epoch));
  s.set_data_shard(static_cast<int64_t>(w.data_shard));
  s.set_data_offset(static_cast<int64_t>(w.data_offset));
  s.set_seed(w.seed);
  s.set_loss_scale(w.loss_scale);
  s.set_loss_scale_hysteresis(w.scale_hysteresis);
  s.set_loss_scale_iteration(w.scale_iteration);
  s.set_loss_scale_last_overflow(w.scale_last_overflow);
  return s;
}

// Whether a phase that failed with `code` may succeed when redone: a lost
// connection, a deadline or a race (a push whose retries ran out in a
// network blip), not a request the servers refuse or a full disk.
bool Transient(uint32_t code) {
  const auto c = static_cast<absl::StatusCode>(code);
  return c == absl::StatusCode::kUnavailable ||
         c == absl::StatusCode::kDeadlineExceeded ||
         c == absl::StatusCode::kAborted;
}

// The code a failed step is answered with while the servers are up:
// ABORTED, but for a disk's refusals and damage (a full or read-only
// checkpoint directory, a damaged checkpoint), which no retry fixes.
absl::StatusCode FailedStepCode(absl::StatusCode c) {
  return c == absl::StatusCode::kResourceExhausted ||
                 c == absl::StatusCode::kPermissionDenied ||
                 c == absl::StatusCode::kDataLoss
             ? c
             : absl::StatusCode::kAborted;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

// Without recovery a job starts at step 0. Servers that already hold it
// at a later step (an earlier run of the job, still up) would have their
// parameters overwritten by the new run's and refuse each of its pushes as
// stale: FAILED_PRECONDITION before anything is written. One element of
// each server's range tells its step.
absl::Status CheckStartsFresh(ShardClient* client, const v1::ModelSpec& spec) {
  const PartitionPlan& plan = client->plan();
  std::vector<Range> ranges;
  for (uint32_t k = 0; k < client->num_servers(); ++k) {
    const Range r = plan.ServerRange(k);
    if (!r.empty()) ranges.push_back({r.begin, r.begin + 1});
  }
  std::vector<float> one(ranges.size());
  std::vector<void*> outs;
  for (float& f : one) outs.push_back(&f);
  uint64_t step = 0;
  absl::Status s = client->GatherRanges(ranges, v1::DTYPE_FP32, outs, &step);
  if (s.ok() && step == 0) return absl::OkStatus();
  const std::string where =
      s.ok() ? absl::StrCat("at step ", step)
             : absl::StrCat("at different steps (", s.message(), ")");
  return absl::FailedPreconditionError(absl::StrCat(
      "the servers already hold job \"", spec.job_id(), "\" ", where,
      ", from an earlier run of it; this run starts at step 0 without "
      "recovery and would overwrite their parameters. For a new run, restart "
      "the servers without that state (a server holds one model at a time; "
      "servers given a --checkpoint_dir restore its newest checkpoint, so "
      "use another or an empty one); to continue that run, start it with "
      "recovery (a checkpoint interval)"));
}

}  // namespace

StepProtocol::StepProtocol(ShardClient* client, StepGroup* group,
                           StepProtocolOptions options)
    : client_(client),
      group_(group),
      options_(std::move(options)),
      epoch_(options_.min_epoch) {}

void StepProtocol::ServerWait(double seconds) const {
  if (options_.on_server_wait) options_.on_server_wait(seconds);
}

absl::StatusOr<bool> StepProtocol::AllOk(const absl::Status& mine,
                                         bool* transient) {
  const uint32_t code = static_cast<uint32_t>(mine.code());
  std::vector<uint32_t> all(group_->size());
  ZS_RETURN_IF_ERROR(group_->AllGather(&code, sizeof(code), all.data()));
  if (transient != nullptr) {
    *transient = std::all_of(all.begin(), all.end(),
                             [](uint32_t c) { return c == 0 || Transient(c); });
  }
  return std::all_of(all.begin(), all.end(), [](uint32_t c) { return c == 0; });
}

absl::StatusOr<Outcome> StepProtocol::Decide(const absl::Status& leader_status,
                                             bool at_start, bool* healthy,
                                             bool redo) {
  OutcomeWord w{};
  std::optional<v1::TrainerState> to;  // leader: the state to move to
  absl::Status err = leader_status;
  std::string why;  // leader: why a step rolls back
  if (leader() && (at_start || !leader_status.ok())) {
    absl::StatusOr<ServerView> view =
        ViewServers(client_, options_.recovery_timeout_seconds);
    bool roll = false;
    if (!view.ok()) {
      err = view.status();
    } else if (at_start && options_.elastic && (to = ContinueState(*view))) {
      w.code = kContinued;
    } else if (at_start) {
      roll = std::any_of(view->steps.begin(), view->steps.end(),
                         [](uint64_t s) { return s != 0; }) ||
             !CommonCheckpoints(view->checkpoints).empty();
    } else {
      roll = NeedsRollback(*view, incarnations_);
      if (roll) why = "a server restarted, or a commit reached only some";
      // Healthy servers and a failure that a redo may not meet again: the
      // step is redone (RollBack resumes the servers at their step, or
      // restores the newest common checkpoint), a few times in a row at
      // most (a failure that keeps coming is the job's error).
      if (!roll && redo && redos_ < kMaxRedos) {
        roll = true;
        ++redos_;
        why = absl::StrCat(leader_status.message(),
                           " (the servers are up, at step ", view->steps[0],
                           "; redone, ", redos_, " of ", kMaxRedos, ")");
      }
    }
    if (view.ok()) {
      incarnations_ = view->incarnations;
      w.epoch = NextEpoch(*view, epoch_);
    }
    if (view.ok() && !at_start && !roll) {
      w.code = kHealthy;  // the phase may be retried
      err = absl::Status(FailedStepCode(leader_status.code()),
                         absl::StrCat(leader_status.message(),
                                      " (the servers are up, at step ",
                                      view->steps[0], ", none restarted)"));
    }
    if (roll) {
      absl::StatusOr<v1::TrainerState> state =
          RollBack(client_, *view, w.epoch);
      if (state.ok()) {
        w.code = kRolledBack;
        to = *std::move(state);
      } else {
        err = state.status();
      }
    }
    if (to.has_value()) StateToWord(*to, &w);
  }
  if (leader() && options_.elastic && options_.world_epoch) {
    w.world = options_.world_epoch();
  }
  if (w.code != kRolledBack && w.code != kHealthy && w.code != kContinued) {
    w.code = static_cast<uint64_t>(err.code());
  }
  ZS_RETURN_IF_ERROR(group_->Broadcast(&w, sizeof(w)));
  world_epoch_ = w.world;
  if (w.code == kRolledBack || w.code == kContinued) {
    epoch_ = w.epoch;
    Outcome o;
    o.kind = w.code == kContinued ? Outcome::Kind::kContinued
                                  : Outcome::Kind::kRolledBack;
    // The broadcast word carries what every rank needs to go on; the
    // leader keeps the whole recorded state (the run's shape too).
    o.state = leader() && to.has_value() ? *std::move(to) : StateOfWord(w);
    if (!why.empty()) o.error = absl::AbortedError(why);
    return o;
  }
  if (healthy != nullptr) *healthy = w.code == kHealthy;
  if (leader()) {
    if (!err.ok()) return err;
    return Outcome();
  }
  if (w.code == 0) return Outcome();
  // This rank's own failure says most; else what the leader found.
  if (!leader_status.ok()) {
    return absl::Status(FailedStepCode(leader_status.code()),
                        absl::StrCat(leader_status.message(),
                                     " (the step failed on every rank)"));
  }
  if (w.code == kHealthy) {
    return absl::AbortedError(
        "another rank's step failed (the leader found every server up, none "
        "restarted; that rank's error says why)");
  }
  return absl::AbortedError(absl::StrCat(
      "the step leader failed (",
      absl::StatusCodeToString(static_cast<absl::StatusCode>(w.code)), ")"));
}

absl::StatusOr<Outcome> StepProtocol::Start(
    const v1::ModelSpec& spec,
    const std::function<absl::Status()>& write_initial,
    const v1::TrainerState& now) {
  ZS_RETURN_IF_ERROR(client_->RegisterModel(spec));
  Outcome o;
  if (recovery()) {
    ZS_ASSIGN_OR_RETURN(o, Decide(absl::OkStatus(), true, nullptr));
  }
  if (o.moved()) return o;
  if (!recovery()) ZS_RETURN_IF_ERROR(CheckStartsFresh(client_, spec));
  absl::Status written;
  if (leader()) written = WriteInitial(spec, write_initial, now);
  if (!recovery()) {
    ZS_RETURN_IF_ERROR(written);
    return o;
  }
  // Every rank learns the outcome (no rank is left in a collective).
  ZS_ASSIGN_OR_RETURN(bool all_ok, AllOk(written));
  if (!all_ok) {
    ZS_RETURN_IF_ERROR(written);
    return absl::AbortedError("rank 0 could not write the parameters");
  }
  return o;
}

absl::Status StepProtocol::WriteInitial(
    const v1::ModelSpec& spec,
    const std::function<absl::Status()>& write_initial,
    const v1::TrainerState& now) {
  if (!recovery()) return write_initial();
  // Then checkpoint step 0, so that a crash before the first interval
  // recovers. A server restarted meanwhile comes back without a model:
  // register it again and start over.
  absl::Status s;
  for (int attempt = 0; attempt < 3; ++attempt) {
    s = client_->RegisterModel(spec);
    if (s.ok()) s = write_initial();
    if (s.ok()) s = client_->Checkpoint(0, &now).status();
    if (s.ok()) return s;
    ZS_RETURN_IF_ERROR(
        ViewServers(client_, options_.recovery_timeout_seconds).status());
  }
  return s;
}

absl::StatusOr<Outcome> StepProtocol::DecideOnServers(
    uint64_t step, const absl::Status& pushed, double loss_scale,
    double max_norm, StepDecision* decision) {
  absl::Status leader_status = pushed;
  bool transient = false;
  if (recovery()) {
    ZS_ASSIGN_OR_RETURN(bool all_ok, AllOk(pushed, &transient));
    if (!all_ok && pushed.ok()) {
      leader_status = absl::AbortedError(
          absl::StrCat("step ", step, ": another rank's push failed"));
    }
  }
  // The decision as raw bits, from the leader.
  struct Word {
    uint32_t code, skip;
    double grad_norm;
    float grad_scale, pad;
  } w{};
  if (leader() && leader_status.ok()) {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<StepNorm> norm = client_->Prepare(epoch_, step);
    ServerWait(SecondsSince(start));
    if (norm.ok()) {
      const double partial[1] = {norm->sum_squares};
      const StepDecision d =
          DecideStep(partial, norm->overflow, loss_scale, max_norm);
      w.skip = d.skip;
      w.grad_norm = d.grad_norm;
      w.grad_scale = d.grad_scale;
    } else {
      leader_status = norm.status();
      transient = Transient(static_cast<uint32_t>(norm.status().code()));
    }
  }
  if (recovery()) {
    ZS_ASSIGN_OR_RETURN(Outcome o,
                        Decide(leader_status, false, nullptr, transient));
    if (o.moved()) return o;
  }
  w.code = static_cast<uint32_t>(leader_status.code());
  ZS_RETURN_IF_ERROR(group_->Broadcast(&w, sizeof(w)));
  if (!leader_status.ok()) return leader_status;
  if (w.code != 0) {
    return absl::AbortedError(absl::StrCat(
        "step ", step, ": the leader failed to prepare (code ", w.code, ")"));
  }
  decision->skip = w.skip != 0;
  decision->grad_norm = w.grad_norm;
  decision->grad_scale = w.grad_scale;
  return Outcome();
}

absl::Status StepProtocol::LeaderCommit(uint64_t step, const StepDecision& d,
                                        double lr,
                                        const v1::TrainerState& after,
                                        bool prepared) {
  const auto start = std::chrono::steady_clock::now();
  absl::Status s;
  if (!prepared && !recovery() && !options_.elastic) {
    // Each server prepares within the commit: one round trip instead of
    // two, and a non-skip commit of NaN/Inf gradients is refused there.
    // Only without recovery: a server that cannot prepare (a SIGTERM'd
    // one) may then leave the others committed, which ends such a job as
    // the failed prepare would; with recovery every server must be
    // prepared before any commits, so that the step can be redone.
    s = client_->Commit(epoch_, step, d.grad_scale, lr, d.skip, &after,
                        /*prepare=*/true);
    if (absl::IsFailedPrecondition(s) &&
        absl::StrContains(s.message(), "NaN/Inf")) {
      s = absl::DataLossError(
          absl::StrCat("step ", step,
                       ": the servers hold NaN/Inf gradients the workers "
                       "did not see (",
                       s.message(), ")"));
    }
    ServerWait(SecondsSince(start));
    return s;
  }
  absl::StatusOr<StepNorm> norm =
      prepared ? StepNorm() : client_->Prepare(epoch_, step);
  s = norm.status();
  if (norm.ok() && norm->overflow && !d.skip) {
    s = absl::DataLossError(absl::StrCat(
        "step ", step,
        ": the servers hold NaN/Inf gradients the workers did not see"));
  } else if (norm.ok()) {
    s = client_->Commit(epoch_, step, d.grad_scale, lr, d.skip, &after);
  }
  ServerWait(SecondsSince(start));
  return s;
}

absl::StatusOr<Outcome> StepProtocol::Commit(
    uint64_t step, const absl::Status& pushed, const StepDecision& decision,
    double lr, const v1::TrainerState& after, bool prepared) {
  if (recovery()) {
    bool transient = false;
    ZS_ASSIGN_OR_RETURN(bool all_ok, AllOk(pushed, &transient));
    absl::Status s = all_ok ? absl::OkStatus()
                     : pushed.ok()
                         ? absl::AbortedError(absl::StrCat(
                               "step ", step, ": another rank's push failed"))
                         : pushed;
    if (leader() && all_ok) {
      s = LeaderCommit(step, decision, lr, after, prepared);
      if (s.ok() && (step + 1) % options_.checkpoint_interval == 0) {
        s = client_->Checkpoint(step + 1, &after).status();
      }
      transient = Transient(static_cast<uint32_t>(s.code()));
    }
    ZS_ASSIGN_OR_RETURN(Outcome o, Decide(s, false, nullptr, transient));
    if (o.kind == Outcome::Kind::kOk) redos_ = 0;  // the step committed
    return o;
  }
  // {status code, committed step} from the leader, as raw bits.
  struct Word {
    uint32_t code;
    uint32_t pad;
    uint64_t step;
  } w{static_cast<uint32_t>(pushed.code()), 0, step};
  absl::Status s = pushed;
  if (leader() && pushed.ok()) {
    s = LeaderCommit(step, decision, lr, after, prepared);
    w.code = static_cast<uint32_t>(s.code());
  }
  ZS_RETURN_IF_ERROR(group_->Broadcast(&w, sizeof(w)));
  if (!s.ok()) return s;
  if (w.code != 0 || w.step != step) {
    return absl::AbortedError(
        absl::StrCat("step ", step, ": the leader failed to commit (code ",
                     w.code, ", step ", w.step, ")"));
  }
  return Outcome();
}

absl::StatusOr<Outcome> StepProtocol::AfterFetch(const absl::Status& fetched) {
  if (!recovery()) {
    ZS_RETURN_IF_ERROR(fetched);
    return Outcome();
  }
  ZS_ASSIGN_OR_RETURN(bool all_ok, AllOk(fetched));
  if (all_ok) return Outcome();
  bool healthy = false;
  absl::StatusOr<Outcome> o =
      Decide(fetched.ok() ? absl::AbortedError("another rank's fetch failed")
                          : fetched,
             false, &healthy);
  if (o.ok() && o->moved()) return o;
  if (healthy) {
    Outcome retry;
    retry.kind = Outcome::Kind::kRetry;
    retry.error = o.ok() ? absl::AbortedError("parameters could not be fetched")
                         : o.status();
    return retry;
  }
  ZS_RETURN_IF_ERROR(o.status());
  return absl::AbortedError("parameters could not be fetched");
}

}  // namespace zeroshard
