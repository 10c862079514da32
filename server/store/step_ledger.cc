#include "server/store/step_ledger.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/client_text.h"
#include "common/model_spec.h"

namespace zeroshard {
namespace {

constexpr size_t kMaxKeyBytes = 256;

std::string RangeText(uint64_t begin, uint64_t end) {
  return absl::StrCat("[", begin, ", ", end, ")");
}

}  // namespace

StepLedger::StepLedger(std::string job_id, Range owned, uint32_t slots,
                       uint32_t alignment)
    : job_id_(std::move(job_id)),
      owned_(owned),
      slots_(slots),
      alignment_(alignment),
      reserved_(slots),
      received_(slots),
      received_elements_(slots, 0) {}

absl::Status StepLedger::CheckJob(const std::string& job_id) const {
  if (job_id == job_id_) return absl::OkStatus();
  return absl::NotFoundError(absl::StrCat(
      "job '", ClientText(job_id), "' is not held by this server (it holds '",
      ClientText(job_id_), "')"));
}

absl::Status StepLedger::CheckRange(uint64_t offset, uint64_t length) const {
  if (length == 0 || offset < owned_.begin || offset > owned_.end ||
      length > owned_.end - offset) {
    return absl::InvalidArgumentError(
        absl::StrCat("range ", RangeText(offset, offset + length),
                     " is empty or outside the owned range ",
                     RangeText(owned_.begin, owned_.end)));
  }
  return absl::OkStatus();
}

absl::Status StepLedger::CheckGates() const {
  if (awaiting_restore_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this server restarted from the checkpoint of step ", restored_step_,
        "; the job must roll back to a checkpoint (Restore) before it goes "
        "on"));
  }
  return absl::OkStatus();
}

absl::Status StepLedger::ShuttingDown() {
  return absl::UnavailableError(
      "the server is shutting down (SIGTERM); the step will be redone after "
      "it restarts");
}

absl::Status StepLedger::CheckClaim(const v1::PushHeader& h) const {
  if (DTypeSize(h.dtype()) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown dtype ", static_cast<int>(h.dtype())));
  }
  if (h.slot() >= slots_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "slot ", h.slot(), " is not below contributions_per_step ", slots_));
  }
  if (h.idempotency_key().empty() ||
      h.idempotency_key().size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("idempotency_key must be 1 to ", kMaxKeyBytes, " bytes"));
  }
  const uint64_t begin = h.offset();
  if (absl::Status s = CheckRange(begin, h.length()); !s.ok()) return s;
  const uint64_t end = begin + h.length();
  if (begin % alignment_ != 0 || (end % alignment_ != 0 && end != owned_.end)) {
    return absl::InvalidArgumentError(
        absl::StrCat("range ", RangeText(begin, end), " is not aligned to ",
                     alignment_, " elements"));
  }
  if (h.epoch() < epoch_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "stale epoch ", h.epoch(), " (the server is at epoch ", epoch_, ")"));
  }
  if (h.epoch() > kMaxEpoch || h.epoch() - epoch_ > kMaxEpochJump) {
    return absl::InvalidArgumentError(
        absl::StrCat("epoch ", h.epoch(), " is more than ", kMaxEpochJump,
                     " above the server's epoch ", epoch_,
                     " or above the largest epoch ", kMaxEpoch));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> StepLedger::AdmitPush(const v1::PushHeader& h,
                                           PushClaim* claim) {
  if (absl::Status s = CheckGates(); !s.ok()) return s;
  if (draining_) return ShuttingDown();
  if (absl::Status s = CheckClaim(h); !s.ok()) return s;
  const Range range{h.offset(), h.offset() + h.length()};
  // A repeated key is acknowledged and ignored, also when it belongs to the
  // step just committed (the client retried a push whose answer was lost).
  if (h.epoch() == epoch_ && h.step() + 1 == step_) {
    auto done = committed_keys_.find(h.idempotency_key());
    if (done != committed_keys_.end() && done->second.done &&
        done->second.slot == h.slot() && done->second.range == range) {
      ++duplicates_ignored_;
      return false;
    }
  }
  if (h.step() != step_) {
    return absl::FailedPreconditionError(absl::StrCat(
        h.step() < step_ ? "stale" : "future", " step ", h.step(),
        " (the server expects contributions for step ", step_, ")"));
  }
  if (committing_) return absl::AbortedError("a commit is in progress; retry");
  if (pending_epoch_ != 0) return EpochPending();
  auto key = keys_.find(h.idempotency_key());
  const bool same_epoch = h.epoch() == epoch_;
  if (same_epoch && key != keys_.end()) {
    const Contribution& c = key->second;
    if (c.slot != h.slot() || !(c.range == range)) {
      return absl::InvalidArgumentError(
          absl::StrCat("idempotency key '", ClientText(h.idempotency_key()),
                       "' was used for a different contribution (slot ", c.slot,
                       ", ", RangeText(c.range.begin, c.range.end), ")"));
    }
    if (!c.done) {
      return absl::AbortedError(
          "the same contribution is still being received; retry");
    }
    ++duplicates_ignored_;
    return false;
  }
  if (!same_epoch && in_flight_ > 0) {
    // A newer epoch aborts the unfinished step; refuse (retryably) while
    // older-epoch streams are still writing their ranges.
    return absl::AbortedError(
        "contributions of an older epoch are still in flight; retry");
  }
  claim->slot = h.slot();
  claim->range = range;
  claim->key = h.idempotency_key();
  claim->epoch = h.epoch();
  claim->step = step_;
  claim->adopts_epoch = !same_epoch;
  ++in_flight_;
  if (!same_epoch) {
    // Staged: the step and the epoch change only once it arrived whole.
    pending_epoch_ = h.epoch();
    return true;
  }
  RangeSet& reserved = reserved_[h.slot()];
  {
    auto next = reserved.lower_bound(range.begin);
    auto overlaps = [&](RangeSet::const_iterator it) {
      return it != reserved.end() && it->first < range.end &&
             range.begin < it->second;
    };
    if (overlaps(next) ||
        (next != reserved.begin() && overlaps(std::prev(next)))) {
      --in_flight_;
      return absl::FailedPreconditionError(absl::StrCat(
          "range ", RangeText(range.begin, range.end), " of slot ", h.slot(),
          " overlaps a contribution already received for step ", step_));
    }
  }
  reserved.emplace(range.begin, range.end);
  keys_.emplace(h.idempotency_key(), Contribution{h.slot(), range, false});
  return true;
}

absl::Status StepLedger::EpochPending() const {
  return absl::AbortedError(absl::StrCat("a contribution of the newer epoch ",
                                         pending_epoch_,
                                         " is being received; retry"));
}

absl::Status StepLedger::AdoptEpoch(PushClaim* claim) {
  // No commit can have started (refused while the claim is staged); only
  // a restore or resume can have moved the epoch meanwhile. Failing, the
  // claim stays staged: its session releases it.
  if (claim->epoch <= epoch_ || claim->step != step_) {
    return absl::FailedPreconditionError(
        absl::StrCat("the server was restored to step ", step_, " epoch ",
                     epoch_, " while the contribution of step ", claim->step,
                     " epoch ", claim->epoch, " was received; push again"));
  }
  pending_epoch_ = 0;
  ResetStep();
  epoch_ = claim->epoch;
  reserved_[claim->slot].emplace(claim->range.begin, claim->range.end);
  keys_.emplace(claim->key, Contribution{claim->slot, claim->range, false});
  claim->adopts_epoch = false;
  return absl::OkStatus();
}

void StepLedger::FinishPush(const PushClaim& claim) {
  received_[claim.slot].emplace(claim.range.begin, claim.range.end);
  received_elements_[claim.slot] += claim.range.size();
  keys_[claim.key].done = true;
  ++contributions_applied_;
  elements_applied_ += claim.range.size();
  --in_flight_;
}

void StepLedger::ReleasePush(const PushClaim& claim) {
  if (claim.adopts_epoch) {  // staged only: nothing else was reserved
    pending_epoch_ = 0;
    --in_flight_;
    return;
  }
  reserved_[claim.slot].erase(claim.range.begin);
  keys_.erase(claim.key);
  --in_flight_;
}

absl::Status StepLedger::BeginPrepare(uint64_t epoch, uint64_t step,
                                      bool* ready,
                                      PrepareResult* result) const {
  *ready = false;
  if (absl::Status s = CheckGates(); !s.ok()) return s;
  if (epoch != epoch_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "epoch ", epoch, " does not match the server's epoch ", epoch_));
  }
  if (step != step_) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot prepare step ", step, ": the server is at step ",
                     step_, step < step_ ? " (already committed)" : ""));
  }
  if (prepared_) {
    *result = prepared_result_;
    return absl::OkStatus();
  }
  if (draining_) return ShuttingDown();
  PrepareResult r;
  r.expected_elements = owned_.size() * slots_;
  for (uint64_t n : received_elements_) r.received_elements += n;
  r.complete = r.received_elements == r.expected_elements && in_flight_ == 0;
  *ready = r.complete;
  *result = r;
  return absl::OkStatus();
}

void StepLedger::SetPrepared(const PrepareResult& result) {
  prepared_ = true;
  prepared_result_ = result;
}

absl::StatusOr<CommitTicket> StepLedger::BeginCommit(
    const v1::CommitStepRequest& req) {
  if (absl::Status s = CheckGates(); !s.ok()) return s;
  CommitTicket t;
  if (last_commit_valid_ && req.step() + 1 == step_ &&
      req.epoch() == last_commit_epoch_) {
    t.already_committed = true;
    t.result = last_commit_;
    t.result.already_committed = true;
    return t;
  }
  if (req.epoch() != epoch_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "epoch ", req.epoch(), " does not match the server's epoch ", epoch_));
  }
  if (req.step() != step_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot commit step ", req.step(), ": the server is at step ", step_));
  }
  if (committing_) return absl::AbortedError("a commit is in progress; retry");
  if (pending_epoch_ != 0) return EpochPending();
  if (!prepared_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "step ", step_, " has not been prepared (commit before prepare)"));
  }
  if (!req.skip()) {
    if (!(std::isfinite(req.clip_coef()) && req.clip_coef() > 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "clip_coef ", req.clip_coef(), " must be finite and > 0"));
    }
    if (!(std::isfinite(req.lr()) && req.lr() >= 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("lr ", req.lr(), " must be finite and >= 0"));
    }
    if (prepared_result_.overflow) {
      return absl::FailedPreconditionError(absl::StrCat(
          "step ", step_,
          " has NaN/Inf gradients; it can only be committed with skip"));
    }
  }
  committing_ = true;
  t.step = step_;
  t.optimizer_step = static_cast<int64_t>(optimizer_steps_ + 1);
  return t;
}

CommitResult StepLedger::FinishCommit(const v1::CommitStepRequest& req,
                                      double seconds) {
  CommitResult r;
  r.applied = !req.skip();
  r.step = step_ + 1;
  LedgerEntry entry{step_, epoch_, 0, req.skip()};
  for (const auto& kv : keys_) entry.contributions += kv.second.done ? 1 : 0;
  if (commits_.empty()) ledger_first_step_ = step_;
  commits_.push_back(entry);
  if (commits_.size() > kMaxLedgerEntries) {
    commits_.pop_front();
    ledger_first_step_ = commits_.front().step;
  }
  ++step_;
  if (r.applied) ++optimizer_steps_;
  std::map<std::string, Contribution> keys = std::move(keys_);
  ResetStep();
  committed_keys_ = std::move(keys);  // for retries of this step's pushes
  if (req.has_trainer_state()) trainer_state_ = req.trainer_state();
  committing_ = false;
  last_commit_valid_ = true;
  last_commit_ = r;
  last_commit_epoch_ = epoch_;
  last_step_seconds_ = seconds;
  return r;
}

absl::Status StepLedger::CheckNoPendingGradients() const {
  if (in_flight_ > 0 || committing_ || prepared_ ||
      std::any_of(received_elements_.begin(), received_elements_.end(),
                  [](uint64_t n) { return n > 0; })) {
    return absl::FailedPreconditionError(
        "gradients for the current step are pending; write parameters "
        "between steps");
  }
  return absl::OkStatus();
}

absl::Status StepLedger::CheckNotCommitting() const {
  if (committing_) return absl::AbortedError("a commit is in progress; retry");
  return absl::OkStatus();
}

absl::Status StepLedger::CheckCheckpointStep(uint64_t step) const {
  if (step != step_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint of step ", step,
        " requested, but the server has committed ", step_, " steps"));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::TrainerState> StepLedger::Resume(uint64_t step,
                                                    uint64_t epoch) {
  if (step != step_ || trainer_state_.step() != step_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot resume at step ", step, ": the server is at step ", step_,
        trainer_state_.step() != step_ ? " without the workers' state" : ""));
  }
  if (absl::Status s = CheckNotCommitting(); !s.ok()) return s;
  ResetStep();
  last_commit_valid_ = false;
  epoch_ = std::max(epoch_, epoch);
  awaiting_restore_ = false;
  return trainer_state_;
}

void StepLedger::Restored(uint64_t step, uint64_t optimizer_steps,
                          uint64_t epoch,
                          const v1::TrainerState& trainer_state) {
  step_ = step;
  optimizer_steps_ = optimizer_steps;
  ResetStep();
  last_commit_valid_ = false;
  epoch_ = std::max(epoch_, epoch);
  trainer_state_ = trainer_state;
  // The ledger keeps the commits that lead up to the restored step.
  while (!commits_.empty() && commits_.back().step >= step) {
    commits_.pop_back();
  }
  if (!commits_.empty() && commits_.back().step + 1 != step) {
    commits_.clear();  // rolled forward past steps this server never saw
  }
  if (commits_.empty()) ledger_first_step_ = step;
  restored_step_ = step;
  awaiting_restore_ = false;
}

void StepLedger::FillStats(bool with_ledger, StoreStats* s) const {
  s->step = step_;
  s->optimizer_steps = optimizer_steps_;
  s->epoch = epoch_;
  s->contributions_applied = contributions_applied_;
  s->duplicates_ignored = duplicates_ignored_;
  s->elements_applied = elements_applied_;
  s->last_step_seconds = last_step_seconds_;
  s->restored_step = restored_step_;
  s->trainer_state = trainer_state_;
  s->awaiting_restore = awaiting_restore_;
  s->ledger_first_step = ledger_first_step_;
  if (with_ledger) s->ledger.assign(commits_.begin(), commits_.end());
}

v1::TrainerState StepLedger::TrainerStateOf(uint64_t step) const {
  if (trainer_state_.step() == step) return trainer_state_;
  v1::TrainerState unknown;
  unknown.set_step(step);
  return unknown;
}

void StepLedger::ResetStep() {
  for (auto& s : reserved_) s.clear();
  for (auto& s : received_) s.clear();
  std::fill(received_elements_.begin(), received_elements_.end(), 0);
  keys_.clear();
  committed_keys_.clear();
  prepared_ = false;
  prepared_result_ = PrepareResult();
}

}  // namespace zeroshard
