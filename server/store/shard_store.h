// ShardStore: one shard server's model state and the rules that guard it.
// No gRPC here: server/shard_service.cc adapts RPCs onto this class.
//
// For its owned range [b, e) of the flat parameter space the store holds, in
// RAM allocated once at registration:
//   master  fp32 p            (e-b) × 4 bytes
//   m, v    fp32 AdamW moments 2 × (e-b) × 4
//   grads   fp32, one buffer per contribution slot (contributions_per_step)
//   serve   bf16 or fp16 serving copy of p, (e-b) × 2
// unless StoreOptions::make_tier is set: then master, m, v, serve and the
// reduced gradient live in the StorageTier it returns (server/storage/
// tier.h; the NVMe tier for --storage=nvme). With contributions_per_step 1
// pushes go straight into the tier's gradient (each range is received once
// per step and overwritten the next); with more slots the slot buffers stay
// in RAM, are summed as above and the sum written to the tier at Prepare.
// A push into the tier streams through a storage::GradWriter (the NVMe
// tier's stages whole file chunks and writes them without reading: RAM per
// push in flight in nvme_tier.h). Elements of a push that breaks off may
// already be in the tier, but never visibly: its range is released, and
// Prepare reduces only once pushes that finished cover every element, each
// of them having overwritten its whole range.
// Both routes give bit-identical results (same arithmetic, same order).
//
// Step protocol (one step at a time, numbered by committed steps `step`):
//   1. BeginPush/PushSession: contributions for `step` land in their slot's
//      gradient buffer; each (slot, range) may be received once per step,
//      each idempotency key is applied once (a repeat is acknowledged and
//      ignored, also one for the step just committed: a retry whose first
//      answer was lost).
//   2. Prepare: once every slot covers the owned range, slots are summed in
//      slot order and the fp64 sum of squares and a NaN/Inf flag reported.
//   3. Commit: AdamW with the leader's clip coefficient and lr (or a skip),
//      then `step` advances. A commit is applied exactly once; a retried
//      commit of the previous step is acknowledged as already committed.
// A membership epoch newer than the store's aborts the unfinished step: its
// contributions are discarded.
//
// Errors: every rejected call returns a non-OK absl::Status (codes chosen
// for the gRPC edge: INVALID_ARGUMENT for malformed input, FAILED_PRECONDITION
// for a request that does not fit the current state, NOT_FOUND for another
// job, ABORTED for a retryable race) and changes nothing.
//
// Threading: all methods are thread-safe. Pushes write their reserved,
// disjoint regions without a global lock; gathers copy under a shared lock
// that only commits and parameter writes take exclusively.
#ifndef ZEROSHARD_SERVER_STORE_SHARD_STORE_H_
#define ZEROSHARD_SERVER_STORE_SHARD_STORE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/env/env.h"
#include "common/model_spec.h"
#include "common/partition.h"
#include "common/thread_pool.h"
#include "proto/zeroshard.pb.h"
#include "server/storage/slot_files.h"
#include "server/storage/tier.h"

namespace zeroshard {

struct StoreOptions {
  uint32_t shard_index = 0;
  uint32_t num_shards = 1;
  int threads = 2;  // optimizer / norm threads (including the caller)
  // Null: the state lives in RAM buffers owned by the store. Otherwise
  // called once at registration with the owned range's layout and the
  // store's thread pool (which outlives the tier); its error fails the
  // registration.
  std::function<absl::StatusOr<std::unique_ptr<storage::StorageTier>>(
      const storage::TierLayout&, ThreadPool*)>
      make_tier;
  std::string storage_name = "ram";  // reported by Stats
  // Checkpoints (server/checkpoint/checkpoint_files.h) are written to and
  // restored from this directory; empty: Checkpoint and Restore answer
  // FAILED_PRECONDITION. `env` null: the process's PosixEnv.
  std::string checkpoint_dir;
  storage::Env* env = nullptr;
  // With a tier and contributions_per_step > 1: gradient slots 1.. live in
  // files in this directory (storage/slot_files.h); empty: in RAM (4 bytes
  // per owned element and slot).
  std::string grad_slot_dir;
};

// One commit applied or skipped by the store (the proto's CommitRecord).
struct LedgerEntry {
  uint64_t step = 0;           // the step committed (0-based)
  uint64_t epoch = 0;          // the epoch of its contributions
  uint64_t contributions = 0;  // push streams that made up its gradient
  bool skipped = false;
};

// The ledger keeps the newest this many commits.
inline constexpr size_t kMaxLedgerEntries = size_t{1} << 20;

struct StoreStats {
  uint64_t step = 0;
  uint64_t optimizer_steps = 0;
  uint64_t epoch = 0;
  Range owned;
  uint64_t bytes_held = 0;
  uint64_t contributions_applied = 0;
  uint64_t duplicates_ignored = 0;
  uint64_t elements_applied = 0;
  uint64_t requests_rejected = 0;
  uint64_t bytes_pushed = 0;
  uint64_t bytes_gathered = 0;
  double last_step_seconds = 0;
  // The storage tier ("ram" without one) and its I/O (zero in RAM).
  std::string storage = "ram";
  uint64_t storage_bytes_read = 0;
  uint64_t storage_bytes_written = 0;
  double last_step_io_wait_seconds = 0;
  double last_step_io_bytes_per_second = 0;
  // Random per store: a change tells clients the server restarted.
  uint64_t incarnation = 0;
  std::vector<uint64_t> checkpoint_steps;  // complete, newest first
  uint64_t restored_step = 0;
  uint64_t checkpoints_written = 0;
  // The workers' state of the last commit or restore.
  v1::TrainerState trainer_state;
  bool awaiting_restore = false;
  // With Stats(true): the commits that made the current state, oldest
  // first: steps ledger_first_step .. step-1, each once.
  std::vector<LedgerEntry> ledger;
  uint64_t ledger_first_step = 0;
};

class ShardStore;

// One contribution being received. Created by ShardStore::BeginPush, fed
// chunks in order, then Finish()ed; destroying it unfinished releases the
// range and applies nothing. Not thread-safe (one stream feeds it).
class PushSession {
 public:
  ~PushSession();
  PushSession(const PushSession&) = delete;
  PushSession& operator=(const PushSession&) = delete;

  // True when the key was already applied: the caller acknowledges without
  // reading further data.
  bool duplicate() const { return duplicate_; }
  uint64_t length() const { return length_; }

  // Converts one chunk into the slot's gradient buffer (`data` aligned to
  // the element size). A duplicate or finished session ignores chunks.
  // INVALID_ARGUMENT when it is larger than kMaxChunkBytes, not a whole number
  // of elements, or runs past the header's length.
  absl::Status AddChunk(const void* data, size_t bytes);

  // Marks the contribution received. INVALID_ARGUMENT if fewer elements
  // arrived than the header announced; ABORTED if a newer epoch discarded
  // the step meanwhile.
  absl::Status Finish();

 private:
  friend class ShardStore;
  PushSession() = default;

  ShardStore* store_ = nullptr;
  bool duplicate_ = false;
  bool finished_ = false;
  uint32_t slot_ = 0;
  Range range_;  // absolute flat range
  uint64_t length_ = 0;
  uint64_t received_ = 0;  // elements so far
  v1::DType dtype_ = v1::DTYPE_UNSPECIFIED;
  std::string key_;
  float* dst_ = nullptr;  // slot buffer at range_.begin; null: the tier
  // Slot 0 into the tier: made at the first chunk, finished by Finish.
  std::unique_ptr<storage::GradWriter> writer_;
  std::vector<float> converted_;  // a chunk in fp32 (bf16/fp16 pushes)
};

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

struct RegisterResult {
  bool created = false;
  uint64_t total = 0;
  Range owned;
  std::vector<Range> ranges;
  uint64_t plan_hash = 0;
  uint64_t step = 0;
};

class ShardStore {
 public:
  explicit ShardStore(StoreOptions options);
  ~ShardStore();

  const StoreOptions& options() const { return options_; }

  // Registers the model (allocates state; seeded init if the spec asks).
  // An identical spec again returns created = false; a different one
  // FAILED_PRECONDITION naming the first difference.
  absl::StatusOr<RegisterResult> RegisterModel(const v1::ModelSpec& spec)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Writes fp32 master weights for [offset, offset + n) (absolute) and
  // refreshes the serving copy. FAILED_PRECONDITION while gradients for the
  // current step are pending.
  absl::Status WriteParameters(const std::string& job_id, uint64_t offset,
                               const float* data, uint64_t n)
      ABSL_LOCKS_EXCLUDED(mu_, data_mu_);
  // Validates a WriteParameters header before any data is read.
  absl::Status CheckWrite(const v1::WriteHeader& header)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Validates a gather request (job, dtype, range inside the owned range).
  absl::Status CheckGather(const v1::GatherRequest& request)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Copies [offset, offset + n) in `dtype` to `out` (n × DTypeSize bytes)
  // under the shared lock and reports the step the data reflects. Call
  // CheckGather first.
  absl::Status GatherInto(uint64_t offset, uint64_t n, v1::DType dtype,
                          void* out, uint64_t* step)
      ABSL_LOCKS_EXCLUDED(data_mu_);

  // Starts receiving a contribution (see PushSession). Errors per header
  // field as described in proto/zeroshard.proto.
  absl::StatusOr<std::unique_ptr<PushSession>> BeginPush(
      const v1::PushHeader& header) ABSL_LOCKS_EXCLUDED(mu_);

  absl::StatusOr<PrepareResult> Prepare(const std::string& job_id,
                                        uint64_t epoch, uint64_t step)
      ABSL_LOCKS_EXCLUDED(mu_);

  absl::StatusOr<CommitResult> Commit(const v1::CommitStepRequest& request)
      ABSL_LOCKS_EXCLUDED(mu_, data_mu_);

  // Checkpoints (shard_store_checkpoint.cc; protocol in the proto's
  // CheckpointRequest). Phase 1 needs the committed steps to equal
  // req.step() and reads p, m, v under the shared data lock (commits wait);
  // phase 2 writes the MANIFEST. FAILED_PRECONDITION without a checkpoint
  // directory or for another step; the Env's errors for I/O.
  absl::StatusOr<v1::CheckpointResponse> Checkpoint(
      const v1::CheckpointRequest& req) ABSL_LOCKS_EXCLUDED(mu_, data_mu_);
  // Restores checkpoint req.step() (0: the newest complete one that loads)
  // into this server's range of the current plan (any K that wrote it),
  // registering its model if none is; discards pending contributions.
  // NOT_FOUND for a step without a complete checkpoint; DATA_LOSS naming
  // the file and block for a checksum mismatch (nothing changes then).
  absl::StatusOr<v1::RestoreResponse> Restore(const v1::RestoreRequest& req)
      ABSL_LOCKS_EXCLUDED(mu_, data_mu_);
  // At start: restores this shard's shutdown snapshot when it is newer
  // than every complete checkpoint (and removes it once loaded), else the
  // newest complete checkpoint that loads, falling back to older ones on
  // DATA_LOSS; `log` gets one line per snapshot or checkpoint skipped and
  // one for the one restored. Returns the step (0: nothing to restore, the
  // store stays unregistered).
  absl::StatusOr<uint64_t> RestoreNewest(
      const std::function<void(const std::string&)>& log)
      ABSL_LOCKS_EXCLUDED(mu_, data_mu_);

  // Graceful shutdown (SIGTERM), step 1: from now on pushes and the
  // preparation of a new step answer UNAVAILABLE; a step already prepared
  // may still be committed. Waits up to `timeout` for that commit (or for
  // the job to abandon the step); false when it did not come.
  bool Drain(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);
  // Step 2, once no RPC runs: snapshots the last committed step under the
  // checkpoint directory (checkpoint_files.h, shutdown snapshots) so the
  // next start resumes there. Returns the SNAPSHOT file's path; "" when
  // there is nothing to keep (no checkpoint directory, no model, step 0).
  absl::StatusOr<std::string> WriteShutdownSnapshot()
      ABSL_LOCKS_EXCLUDED(mu_, data_mu_);

  // `with_ledger`: also copy the commit ledger (up to kMaxLedgerEntries).
  // Every Commit that applies or skips a step appends to it (not a retry
  // answered as already committed); a restore to step R drops the entries
  // of steps >= R (all of them when the rest would not lead up to R).
  StoreStats Stats(bool with_ledger = false) const ABSL_LOCKS_EXCLUDED(mu_);
  // Copies the registered spec (left empty before registration).
  void SpecInto(v1::ModelSpec* spec) const ABSL_LOCKS_EXCLUDED(mu_);
  // The job held, or "" before registration.
  std::string job_id() const ABSL_LOCKS_EXCLUDED(mu_);

  // Counts a request rejected before it reached the store (malformed
  // stream framing, for instance).
  void CountRejected() { rejected_.fetch_add(1); }

 private:
  friend class PushSession;

  struct Contribution {
    uint32_t slot;
    Range range;
    bool done;  // false while its stream is still being received
  };
  // Per-slot set of disjoint ranges, keyed by begin.
  using RangeSet = std::map<uint64_t, uint64_t>;

  absl::Status CheckJob(const std::string& job_id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // FAILED_PRECONDITION after a restore at start until a Restore RPC: the
  // job's contributions in flight were lost with the old process.
  absl::Status CheckNotAwaitingRestore() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // UNAVAILABLE for new work after Drain().
  static absl::Status ShuttingDown();
  // INVALID_ARGUMENT unless [offset, offset + length) is non-empty and
  // inside the owned range.
  absl::Status CheckOwnedRange(uint64_t offset, uint64_t length) const;
  absl::Status Reject(absl::Status s) {
    rejected_.fetch_add(1);
    return s;
  }
  // Discards the current step's contributions (new epoch).
  void ResetStepLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishPush(PushSession* session) ABSL_LOCKS_EXCLUDED(mu_);
  void ReleasePush(PushSession* session) ABSL_LOCKS_EXCLUDED(mu_);
  // Sums slots into slot 0 (and into the tier's gradient when there is
  // one) and computes the norm partial. Errors come from the tier only.
  absl::Status ReduceSlotsLocked(PrepareResult* result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Registration's tier route: creates the tier, seeded init.
  absl::Status CreateTier(const v1::SeededInit& init)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the session's next n pushed elements (its wire dtype) into the
  // gradient of its slot: the tier's (slot 0, through its GradWriter) or a
  // slot file.
  absl::Status PushToTier(PushSession* session, const void* data, uint64_t n);
  // Restores `manifest` (complete) with the new epoch; see Restore.
  absl::Status RestoreManifest(const v1::CheckpointManifest& manifest,
                               uint64_t epoch)
      ABSL_LOCKS_EXCLUDED(mu_, data_mu_);
  // Rereads the checkpoint listing into checkpoint_steps_.
  void RefreshCheckpointList() ABSL_LOCKS_EXCLUDED(mu_);
  // This shard's checkpoint file header for `step`.
  v1::ShardCheckpointHeader ShardHeaderLocked(uint64_t step) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The workers' state recorded with `step` (only the step when the last
  // commit did not record one for it).
  v1::TrainerState TrainerStateLocked(uint64_t step) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes this shard's file (checkpoint phase 1, shutdown snapshot) of p,
  // m, v under the checkpoint directory; the caller holds data_mu_ shared.
  absl::StatusOr<v1::CheckpointShard> WriteShardFileLocked(
      const v1::ShardCheckpointHeader& h);
  // Restore with req.resume(): keeps the state at req.step().
  absl::StatusOr<v1::RestoreResponse> Resume(const v1::RestoreRequest& req)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Loads this shard's newest shutdown snapshot if newer than `newest`
  // (the newest complete checkpoint's step); removes snapshots it does not
  // load. The restored step, or 0.
  uint64_t RestoreSnapshot(uint64_t newest,
                           const std::function<void(const std::string&)>& log)
      ABSL_LOCKS_EXCLUDED(mu_, data_mu_);
  // Rewrites the serving copy of owned-relative [begin, end) from master.
  void RefreshServing(uint64_t begin, uint64_t end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(data_mu_);

  const StoreOptions options_;
  ThreadPool pool_;

  mutable absl::Mutex mu_;  // metadata: spec, step, ledgers
  bool registered_ ABSL_GUARDED_BY(mu_) = false;
  v1::ModelSpec spec_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<PartitionPlan> plan_;       // set once at registration
  Range owned_;                               // set once at registration
  uint32_t slots_ = 1;                        // set once at registration
  v1::DType serving_dtype_ = v1::DTYPE_BF16;  // set once at registration
  // Optimizer work items: owned-relative ranges of at most kTile elements,
  // each inside one parameter group.
  struct Tile {
    uint64_t begin, end;
    uint32_t group;
  };
  std::vector<Tile> tiles_;  // set once at registration

  uint64_t step_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t optimizer_steps_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<RangeSet> reserved_ ABSL_GUARDED_BY(mu_);  // in flight + done
  std::vector<RangeSet> received_ ABSL_GUARDED_BY(mu_);  // done
  std::vector<uint64_t> received_elements_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Contribution> keys_ ABSL_GUARDED_BY(mu_);
  // The keys of the last committed step (pushes retried after the commit).
  std::map<std::string, Contribution> committed_keys_ ABSL_GUARDED_BY(mu_);
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool prepared_ ABSL_GUARDED_BY(mu_) = false;
  bool committing_ ABSL_GUARDED_BY(mu_) = false;
  bool last_commit_valid_ ABSL_GUARDED_BY(mu_) = false;
  CommitResult last_commit_ ABSL_GUARDED_BY(mu_);
  uint64_t last_commit_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  PrepareResult prepared_result_ ABSL_GUARDED_BY(mu_);
  v1::TrainerState trainer_state_ ABSL_GUARDED_BY(mu_);  // of the last commit
  std::vector<uint64_t> checkpoint_steps_ ABSL_GUARDED_BY(mu_);
  uint64_t restored_step_ ABSL_GUARDED_BY(mu_) = 0;
  bool awaiting_restore_ ABSL_GUARDED_BY(mu_) = false;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;  // Drain() called
  uint64_t checkpoints_written_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<LedgerEntry> ledger_ ABSL_GUARDED_BY(mu_);  // oldest first
  uint64_t ledger_first_step_ ABSL_GUARDED_BY(mu_) = 0;
  const uint64_t incarnation_;

  uint64_t contributions_applied_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t duplicates_ignored_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t elements_applied_ ABSL_GUARDED_BY(mu_) = 0;
  double last_step_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> rejected_{0};
  std::atomic<uint64_t> bytes_pushed_{0};
  std::atomic<uint64_t> bytes_gathered_{0};

  // Model state. The buffers are allocated once at registration; master,
  // m, v and serve change only under data_mu_ held exclusively.
  mutable absl::Mutex data_mu_;
  uint64_t data_step_ ABSL_GUARDED_BY(data_mu_) = 0;
  struct Buffers;
  std::unique_ptr<Buffers> buf_;
  // Set once at registration when options_.make_tier is; then buf_ holds
  // only the slot buffers (none with one slot).
  std::unique_ptr<storage::StorageTier> tier_;
  absl::Mutex grad_mu_;  // serialises Prepare's gradient reads and writes
  // Set once at registration with a tier, several slots and
  // options_.grad_slot_dir: slots 1.. (slot 0 is the tier's gradient).
  std::unique_ptr<storage::SlotFiles> slot_files_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_STORE_SHARD_STORE_H_
