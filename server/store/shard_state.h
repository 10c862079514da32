// ShardState: the model state of one shard's owned range and the arithmetic
// on it, free of the step protocol (step_ledger.h decides what may happen;
// this does it). Elements are owned-relative, [0, n):
//
//   tier   a storage::StorageTier (storage/tier.h) holding the fp32 master
//          p, AdamW's m and v, the 16-bit serving copy and the gradient
//          accumulator g, which is contribution slot 0's gradient: RamTier
//          in RAM (the default), NvmeTier on NVMe (StoreOptions::make_tier);
//   slots  the gradients of slots 1..S-1 when a step has S > 1
//          contributions (storage/grad_slots.h: RAM, or files when a slot
//          directory is given);
//   tiles  the optimizer's and the norm's work items: ranges of at most
//          64 Ki elements inside one parameter group.
//
// Reduce adds slots 1..S-1 into g in slot order — the sum never depends on
// the order in which contributions arrived — and reports the fp64 sum of
// squares (elements in order, tiles in order) and whether any element is
// NaN/Inf. Every route gives the same bits: RAM or NVMe, slots in RAM or
// in files.
//
// The arrays carry the number of committed steps they reflect (step()).
//
// Threading: thread-safe. p, m, v and the serving copy change under the
// state's lock held exclusively (Step, WriteMaster, Load) and are read
// under it shared (Gather, ReadCommitted). Gradients are the step
// protocol's: writers of disjoint ranges run concurrently, and the caller
// runs Reduce only once no writer is left. Errors: the tier's and the
// slots' (RESOURCE_EXHAUSTED for a full device, DATA_LOSS for a bad
// checksum, naming the file); a failed Step or Load changes nothing that
// can be read.
#ifndef ZEROSHARD_SERVER_STORE_SHARD_STATE_H_
#define ZEROSHARD_SERVER_STORE_SHARD_STATE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/env/env.h"
#include "common/optim/adamw.h"
#include "common/partition.h"
#include "common/thread_pool.h"
#include "proto/zeroshard.pb.h"
#include "server/checkpoint/checkpoint_files.h"
#include "server/storage/grad_slots.h"
#include "server/storage/tier.h"
#include "server/store/store_types.h"

namespace zeroshard {

// A registration's answer (the proto's RegisterModelResponse).
struct RegisterResult {
  bool created = false;
  uint64_t total = 0;
  Range owned;
  std::vector<Range> ranges;
  uint64_t plan_hash = 0;
  uint64_t step = 0;
};

class ShardState {
 public:
  struct Options {
    ThreadPool* pool = nullptr;  // not owned; must outlive the state
    TierFactory make_tier;       // null: a RamTier
    // Slots 1.. in files under this directory when not empty (and the
    // model has more than one contribution per step); else in RAM.
    std::string slot_dir;
    Env* env = nullptr;  // for the slot files; null: DefaultEnv()
  };

  // The state of shard `shard` of `spec`'s plan (spec valid): the tier
  // made, p seeded from spec.init() (zero without a seed), m = v = 0.
  static absl::StatusOr<std::unique_ptr<ShardState>> Create(
      const v1::ModelSpec& spec, uint32_t shard, const Options& options);

  const v1::ModelSpec& spec() const { return spec_; }
  const PartitionPlan& plan() const { return plan_; }
  // The owned range (absolute); elements below are relative to its begin.
  Range owned() const { return owned_; }
  uint64_t size() const { return owned_.size(); }
  // The registration's answer for a ledger at `step`.
  RegisterResult Registration(bool created, uint64_t step) const;

  // A writer of slot `slot`'s gradient over [offset, offset + n).
  absl::StatusOr<std::unique_ptr<storage::GradWriter>> NewGradWriter(
      uint32_t slot, uint64_t offset, uint64_t n);
  // Sums the slots into g; the fp64 sum of squares and a NaN/Inf flag.
  absl::Status Reduce(double* sum_squares, bool* overflow);
  // Commits step `step` - 1: one AdamW step over every tile with
  // (*hypers)[tile's group], or none (a skipped step) without `hypers`.
  absl::Status Step(std::optional<std::vector<AdamWHyper>> hypers,
                    uint64_t step) ABSL_LOCKS_EXCLUDED(mu_);

  // [offset, offset + n) in `dtype` (fp32 from the master, bf16/fp16 from
  // the serving copy or converted from the master) into `out`, and the
  // step it reflects.
  absl::Status Gather(uint64_t offset, uint64_t n, v1::DType dtype, void* out,
                      uint64_t* step) ABSL_LOCKS_EXCLUDED(mu_);
  // Writes p[offset, offset + n) and its serving copy.
  absl::Status WriteMaster(uint64_t offset, const float* data, uint64_t n)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Calls `fn` with a reader of p, m and v (array 0, 1, 2; owned-relative)
  // while they reflect step `step`: ABORTED when they reflect another.
  absl::Status ReadCommitted(
      uint64_t step,
      const std::function<absl::Status(const checkpoint::ArraySource&)>& fn)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Replaces p, m and v (size() each) with those of step `step` and makes
  // them durable.
  absl::Status Load(const float* p, const float* m, const float* v,
                    uint64_t step) ABSL_LOCKS_EXCLUDED(mu_);

  // The owned range, RAM held and the storage's I/O, into `stats`.
  void FillStats(StoreStats* stats) const;

 private:
  // Elements [begin, end) updated with `group`'s hyperparameters.
  struct Tile {
    uint64_t begin, end;
    uint32_t group;
  };
  ShardState(PartitionPlan plan, uint32_t shard, const v1::ModelSpec& spec,
             ThreadPool* pool);
  absl::Status Init(const v1::SeededInit& init);
  absl::Status ReadArray(int array, uint64_t offset, uint64_t n, float* out)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const v1::ModelSpec spec_;
  const PartitionPlan plan_;
  const Range owned_;
  const uint32_t slots_;
  const v1::DType serving_;
  ThreadPool* const pool_;
  std::vector<Tile> tiles_;
  std::unique_ptr<storage::StorageTier> tier_;
  std::unique_ptr<storage::GradSlots> grad_slots_;  // slots 1..; null: one
  mutable absl::Mutex mu_;  // p, m, v, serve (in the tier) and step_
  uint64_t step_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_STORE_SHARD_STATE_H_
