// ShardStore: one shard server's model state and the rules that guard it,
// free of gRPC (server/shard_service.cc adapts RPCs onto it). It only
// coordinates its pieces:
//
//   StepLedger   (step_ledger.h)   the step protocol's bookkeeping: which
//                pushes, prepares, commits and restores fit the state;
//                pure, guarded by the store's mutex
//   ShardState   (shard_state.h)   the model's p, m, v, serving copy and
//                gradients in a storage tier (RAM or NVMe), the arithmetic
//                on them, and the push streams (push_session.h)
//   Checkpointer (server/checkpoint/checkpointer.h) checkpoint and snapshot
//                files, and which one to restore
//
// Step protocol (one step at a time, numbered by committed steps): pushes
// (BeginPush → PushSession) fill the step's contribution slots; Prepare
// reduces them once every slot covers the owned range and reports the fp64
// sum of squares and a NaN/Inf flag; Commit runs AdamW with the leader's
// clip coefficient and lr (or skips), exactly once.
//
// Errors: every rejected call returns a non-OK absl::Status (codes chosen
// for the gRPC edge: INVALID_ARGUMENT for malformed input,
// FAILED_PRECONDITION for a request that does not fit the current state,
// NOT_FOUND for another job, ABORTED for a retryable race) and changes
// nothing. Threading: every method is thread-safe; pushes write disjoint
// ranges concurrently, gathers read concurrently (the state's lock).
#ifndef ZEROSHARD_SERVER_STORE_SHARD_STORE_H_
#define ZEROSHARD_SERVER_STORE_SHARD_STORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/thread_pool.h"
#include "proto/zeroshard.pb.h"
#include "server/checkpoint/checkpointer.h"
#include "server/store/push_session.h"
#include "server/store/shard_state.h"
#include "server/store/step_ledger.h"
#include "server/store/store_types.h"

namespace zeroshard {

class ShardStore : private PushOwner {
 public:
  explicit ShardStore(StoreOptions options);
  ~ShardStore() override;

  const StoreOptions& options() const { return options_; }

  // Registers the model (allocates its state; seeded init if the spec
  // asks). An identical spec again returns created = false; a different
  // one FAILED_PRECONDITION naming the first difference.
  absl::StatusOr<RegisterResult> RegisterModel(const v1::ModelSpec& spec)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Validates a WriteParameters header before any data is read;
  // FAILED_PRECONDITION while gradients of the current step are pending.
  absl::Status CheckWrite(const v1::WriteHeader& header)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Writes fp32 master weights for [offset, offset + n) (absolute) and
  // refreshes the serving copy.
  absl::Status WriteParameters(const std::string& job_id, uint64_t offset,
                               const float* data, uint64_t n)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Writes a whole WriteParameters stream once it ended well: `chunks`
  // (fp32 bytes, whole elements, in order) cover exactly the range of
  // `header`, which is checked (CheckWrite) before anything is written.
  absl::Status WriteParameters(const v1::WriteHeader& header,
                               const std::vector<std::string>& chunks)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Validates a gather request (job, dtype, range inside the owned range).
  absl::Status CheckGather(const v1::GatherRequest& request)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Copies [offset, offset + n) in `dtype` to `out` (n × DTypeSize bytes)
  // and reports the step the data reflects. Call CheckGather first.
  absl::Status GatherInto(uint64_t offset, uint64_t n, v1::DType dtype,
                          void* out, uint64_t* step);

  // Starts receiving a contribution (see PushSession). Errors per header
  // field as described in proto/zeroshard.proto.
  absl::StatusOr<std::unique_ptr<PushSession>> BeginPush(
      const v1::PushHeader& header) ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<PrepareResult> Prepare(const std::string& job_id,
                                        uint64_t epoch, uint64_t step)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<CommitResult> Commit(const v1::CommitStepRequest& request)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Checkpoints (protocol in the proto's CheckpointRequest). Phase 1 needs
  // the committed steps to equal req.step() and reads p, m, v while they
  // reflect it (commits wait); phase 2 writes the MANIFEST, with the
  // request's workers' state or, without one (zeroshard-ctl checkpoint),
  // the one the server held at phase 1: the job may have committed more
  // steps in between.
  absl::StatusOr<v1::CheckpointResponse> Checkpoint(
      const v1::CheckpointRequest& req) ABSL_LOCKS_EXCLUDED(mu_);
  // Restores checkpoint req.step() (0: the newest complete one that loads)
  // into this server's range of the current plan (any K that wrote it),
  // registering its model if none is; discards pending contributions. With
  // req.resume(): keeps the state at req.step() (every server there with
  // the workers' state of it) and only moves the epoch.
  absl::StatusOr<v1::RestoreResponse> Restore(const v1::RestoreRequest& req)
      ABSL_LOCKS_EXCLUDED(mu_);
  // At start: restores the shutdown snapshot or the newest checkpoint
  // (Checkpointer::RestoreNewest; `log` gets its lines), then refuses
  // pushes, prepares and commits until the job restores. Returns the step
  // (0: nothing).
  absl::StatusOr<uint64_t> RestoreNewest(
      const std::function<void(const std::string&)>& log)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Graceful shutdown (SIGTERM), step 1: from now on pushes and the
  // preparation of a new step answer UNAVAILABLE; a step already prepared
  // may still be committed. Waits up to `timeout` for that commit (or for
  // the job to abandon the step); false when it did not come.
  bool Drain(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);
  // Step 2, once no RPC runs: snapshots the last committed step so the
  // next start resumes there. Returns the snapshot's path; "" when there
  // is nothing to keep (no checkpoint directory, no model, step 0).
  absl::StatusOr<std::string> WriteShutdownSnapshot() ABSL_LOCKS_EXCLUDED(mu_);

  // `with_ledger`: also copy the commit ledger (step_ledger.h).
  StoreStats Stats(bool with_ledger = false) const ABSL_LOCKS_EXCLUDED(mu_);
  // Copies the registered spec (left empty before registration).
  void SpecInto(v1::ModelSpec* spec) const ABSL_LOCKS_EXCLUDED(mu_);
  // The job held, or "" before registration.
  std::string job_id() const ABSL_LOCKS_EXCLUDED(mu_);
  // Counts a request rejected before it reached the store (malformed
  // stream framing, for instance).
  void CountRejected() { rejected_.fetch_add(1); }

 private:
  absl::Status Reject(absl::Status s) {
    rejected_.fetch_add(1);
    return s;
  }
  absl::Status CheckJob(const std::string& job_id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // PushOwner: what the push sessions report.
  void PushFinished(const PushClaim& claim) override ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status PushAdoptEpoch(PushClaim* claim) override
      ABSL_LOCKS_EXCLUDED(mu_);
  void PushReleased(const PushClaim& claim) override ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status PushRejected(absl::Status s) override { return Reject(s); }
  void PushedBytes(uint64_t bytes) override { bytes_pushed_.fetch_add(bytes); }
  // Loads `manifest` (complete; `snapshot`: a shutdown snapshot's) with the
  // new epoch. Nothing changes unless all of it loads and checks out.
  absl::Status RestoreManifest(const v1::CheckpointManifest& manifest,
                               bool snapshot, uint64_t epoch)
      ABSL_LOCKS_EXCLUDED(mu_);
  ShardFacts FactsLocked(uint64_t step) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const StoreOptions options_;
  ThreadPool pool_;
  Checkpointer checkpointer_;
  const uint64_t incarnation_;

  mutable absl::Mutex mu_;
  std::optional<StepLedger> ledger_ ABSL_GUARDED_BY(mu_);  // registered
  bool draining_ ABSL_GUARDED_BY(mu_) = false;             // Drain() called
  // The workers' state of the step of the last phase 1, for its phase 2.
  v1::TrainerState checkpointed_state_ ABSL_GUARDED_BY(mu_);
  // Set once at registration (under mu_), then read without it.
  std::unique_ptr<ShardState> state_;

  std::atomic<uint64_t> rejected_{0};
  std::atomic<uint64_t> bytes_pushed_{0};
  std::atomic<uint64_t> bytes_gathered_{0};
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_STORE_SHARD_STORE_H_
