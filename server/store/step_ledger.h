// StepLedger: the step protocol's bookkeeping of one shard, and nothing
// else: no buffers, no I/O, no locks (the store calls it under its metadata
// mutex). Every request of the protocol asks the ledger whether it fits the
// shard's state and, if it does, what it changes:
//
//   1. pushes: each contribution claims (slot, range) for the current step
//      under an idempotency key. A slot's ranges are disjoint and each is
//      received once per step; a repeated key is acknowledged and ignored,
//      also one of the step just committed (a retry whose first answer was
//      lost). A claim is reserved while its stream runs, received when it
//      finishes whole, released when it breaks off.
//   2. prepare: the step is complete when every slot covers the owned
//      range and no stream is in flight; the store then reduces the slots
//      and records the result here (later prepares return it).
//   3. commit: exactly once per step; a retried commit of the previous step
//      is answered as already committed. Advances the step, counts the
//      optimizer update, records the commit in the ledger of commits.
//   A membership epoch newer than the ledger's aborts the unfinished step
//   (its contributions are discarded) — but only once a push of that epoch
//   has been received whole: until then the push is staged (its claim
//   adopts_epoch) and every other push and commit of the step answers
//   ABORTED (retry), so a newer-epoch push that is rejected or breaks off
//   changes nothing. An epoch may rise by at most kMaxEpochJump per push
//   and never above kMaxEpoch (the values above are reserved), so no push
//   can wedge the server at an epoch nobody can follow; only an admin's
//   Restore moves it further (up to kMaxEpoch). After a restart the ledger
//   refuses
//   pushes, prepares and commits until the job restores (awaiting
//   restore); after Drain() it refuses new pushes and prepares.
//
// Errors: every rejected request returns a non-OK status (INVALID_ARGUMENT
// for malformed input, FAILED_PRECONDITION for a request that does not fit
// the state, ABORTED for a retryable race, UNAVAILABLE while draining) and
// changes nothing. Threading: none (the caller serialises all calls).
#ifndef ZEROSHARD_SERVER_STORE_STEP_LEDGER_H_
#define ZEROSHARD_SERVER_STORE_STEP_LEDGER_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/partition.h"
#include "proto/zeroshard.pb.h"
#include "server/store/store_types.h"

namespace zeroshard {

// The ledger keeps the newest this many commits.
inline constexpr size_t kMaxLedgerEntries = size_t{1} << 20;

// Epochs above this are reserved (INVALID_ARGUMENT), and a push may raise
// the epoch by at most kMaxEpochJump.
inline constexpr uint64_t kMaxEpoch = (uint64_t{1} << 62) - 1;
inline constexpr uint64_t kMaxEpochJump = uint64_t{1} << 32;

struct PrepareResult {
  bool complete = false;
  uint64_t received_elements = 0;
  uint64_t expected_elements = 0;
  double sum_squares = 0;
  bool overflow = false;
};

struct CommitResult {
  bool applied = false;
  bool already_committed = false;
  uint64_t step = 0;
};

// One contribution as the ledger tracks it.
struct PushClaim {
  uint32_t slot = 0;
  Range range;  // absolute flat range
  std::string key;
  // A push of a newer epoch, not received whole yet: nothing of it is
  // reserved, and its data must be staged until StepLedger::AdoptEpoch.
  bool adopts_epoch = false;
  uint64_t epoch = 0;
  uint64_t step = 0;
};

// The outcome of StepLedger::BeginCommit.
struct CommitTicket {
  bool already_committed = false;  // `result` answers the retry
  CommitResult result;
  uint64_t step = 0;           // the step to apply
  int64_t optimizer_step = 0;  // its AdamW step count (1-based)
};

class StepLedger {
 public:
  // Job `job_id`'s owned range [owned.begin, owned.end) of a model with
  // `slots` contributions per step and ranges aligned to `alignment`
  // elements.
  StepLedger(std::string job_id, Range owned, uint32_t slots,
             uint32_t alignment);

  // NOT_FOUND for a request of another job.
  absl::Status CheckJob(const std::string& job_id) const;
  // INVALID_ARGUMENT unless [offset, offset + length) is non-empty and
  // inside the owned range.
  absl::Status CheckRange(uint64_t offset, uint64_t length) const;

  // ------------------------------------------------------------- pushes
  // Admits the push `h` (its job already checked): the gates, dtype, slot,
  // key, range, epoch and step rules above. True for a new contribution,
  // whose range and key are then reserved (`claim` filled); false for a
  // duplicate to acknowledge.
  absl::StatusOr<bool> AdmitPush(const v1::PushHeader& h, PushClaim* claim);
  // A claim that adopts_epoch delivered every element: the unfinished
  // step is discarded, the epoch becomes the claim's and the claim an
  // ordinary one of the new epoch (still in flight; its data may now be
  // written, then FinishPush). FAILED_PRECONDITION when a restore moved
  // the ledger past it meanwhile.
  absl::Status AdoptEpoch(PushClaim* claim);
  // The claim's stream delivered every element.
  void FinishPush(const PushClaim& claim);
  // The claim's stream broke off: its range and key are free again.
  void ReleasePush(const PushClaim& claim);

  // ------------------------------------------------------------ prepare
  // Checks a prepare of (epoch, step). *ready: the step is complete and not
  // yet reduced (reduce, then SetPrepared); otherwise *result answers it
  // (prepared before, or incomplete with the counts).
  absl::Status BeginPrepare(uint64_t epoch, uint64_t step, bool* ready,
                            PrepareResult* result) const;
  void SetPrepared(const PrepareResult& result);

  // ------------------------------------------------------------- commit
  // Checks the commit `req` and marks a commit in progress (unless it is a
  // retry of the last one: ticket.already_committed).
  absl::StatusOr<CommitTicket> BeginCommit(const v1::CommitStepRequest& req);
  // The optimizer step failed: nothing changed, the commit may be retried.
  void AbortCommit() { committing_ = false; }
  // The step was applied (or skipped); `seconds` it took.
  CommitResult FinishCommit(const v1::CommitStepRequest& req, double seconds);

  // ------------------------------------------- parameters, checkpoints
  // FAILED_PRECONDITION while gradients of the current step are pending.
  absl::Status CheckNoPendingGradients() const;
  // ABORTED while a commit runs (retry).
  absl::Status CheckNotCommitting() const;
  // A checkpoint of committed step `step` (phase 1) may be written.
  absl::Status CheckCheckpointStep(uint64_t step) const;
  // Resume at `step` with epoch >= `epoch` (RestoreRequest.resume): the
  // ledger must be at that step with the workers' state of it. Discards
  // pending contributions; returns the workers' state.
  absl::StatusOr<v1::TrainerState> Resume(uint64_t step, uint64_t epoch);
  // The state was restored to a checkpoint of `step`: pending contributions
  // are discarded, the epoch becomes at least `epoch`, the ledger keeps
  // only the commits that lead up to `step`.
  void Restored(uint64_t step, uint64_t optimizer_steps, uint64_t epoch,
                const v1::TrainerState& trainer_state);

  // -------------------------------------------------------------- gates
  // Restarted from a checkpoint or snapshot: refuse until a restore.
  void set_awaiting_restore() { awaiting_restore_ = true; }
  // Shutting down: refuse new pushes and prepares.
  void set_draining() { draining_ = true; }
  // Neither a prepared step nor a commit in progress (Drain waits for it).
  bool settled() const { return !prepared_ && !committing_; }
  // The step in progress is prepared (SetPrepared).
  bool prepared() const { return prepared_; }

  // ------------------------------------------------------------- state
  uint64_t step() const { return step_; }
  uint64_t optimizer_steps() const { return optimizer_steps_; }
  uint64_t epoch() const { return epoch_; }
  bool awaiting_restore() const { return awaiting_restore_; }
  uint64_t restored_step() const { return restored_step_; }
  const v1::TrainerState& trainer_state() const { return trainer_state_; }
  // The workers' state recorded with `step` (only the step when the last
  // commit did not record one for it).
  v1::TrainerState TrainerStateOf(uint64_t step) const;
  uint64_t contributions_applied() const { return contributions_applied_; }
  uint64_t duplicates_ignored() const { return duplicates_ignored_; }
  // The commits that made the current state, oldest first: steps
  // ledger_first_step() .. step()-1, each once (the newest
  // kMaxLedgerEntries).
  const std::deque<LedgerEntry>& commits() const { return commits_; }
  uint64_t ledger_first_step() const { return ledger_first_step_; }
  // The ledger's fields of `stats` (the commits with `with_ledger`).
  void FillStats(bool with_ledger, StoreStats* stats) const;

 private:
  struct Contribution {
    uint32_t slot;
    Range range;
    bool done;  // false while its stream is still being received
  };
  // Per-slot set of disjoint ranges, keyed by begin.
  using RangeSet = std::map<uint64_t, uint64_t>;

  absl::Status CheckGates() const;
  // ABORTED while a push of a newer epoch is staged.
  absl::Status EpochPending() const;
  static absl::Status ShuttingDown();
  absl::Status CheckClaim(const v1::PushHeader& h) const;
  void ResetStep();

  const std::string job_id_;
  const Range owned_;
  const uint32_t slots_;
  const uint32_t alignment_;

  uint64_t step_ = 0;
  uint64_t optimizer_steps_ = 0;
  uint64_t epoch_ = 0;
  std::vector<RangeSet> reserved_;  // in flight + done, per slot
  std::vector<RangeSet> received_;  // done, per slot
  std::vector<uint64_t> received_elements_;
  std::map<std::string, Contribution> keys_;
  std::map<std::string, Contribution> committed_keys_;  // of the last commit
  int in_flight_ = 0;
  uint64_t pending_epoch_ = 0;  // of a claim that adopts_epoch; 0: none
  bool prepared_ = false;
  PrepareResult prepared_result_;
  bool committing_ = false;
  bool last_commit_valid_ = false;
  CommitResult last_commit_;
  uint64_t last_commit_epoch_ = 0;
  v1::TrainerState trainer_state_;  // of the last commit or restore
  bool awaiting_restore_ = false;
  bool draining_ = false;
  uint64_t restored_step_ = 0;
  std::deque<LedgerEntry> commits_;  // oldest first
  uint64_t ledger_first_step_ = 0;
  uint64_t contributions_applied_ = 0;
  uint64_t duplicates_ignored_ = 0;
  uint64_t elements_applied_ = 0;
  double last_step_seconds_ = 0;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_STORE_STEP_LEDGER_H_
