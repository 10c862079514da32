// The shard store's options (StoreOptions: how a server configures its
// store) and its report (StoreStats: GetStats, metrics; each piece of the
// store fills its own fields: StepLedger, ShardState and Checkpointer
// ::FillStats, the store its counters).
#ifndef ZEROSHARD_SERVER_STORE_STORE_TYPES_H_
#define ZEROSHARD_SERVER_STORE_STORE_TYPES_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/env/env.h"
#include "common/partition.h"
#include "common/thread_pool.h"
#include "proto/zeroshard.pb.h"
#include "server/storage/tier.h"

namespace zeroshard {

// Makes the tier of a registered model: called once with the owned range's
// layout and the store's thread pool (which outlives the tier).
using TierFactory =
    std::function<absl::StatusOr<std::unique_ptr<storage::StorageTier>>(
        const storage::TierLayout&, ThreadPool*)>;

struct StoreOptions {
  uint32_t shard_index = 0;
  uint32_t num_shards = 1;
  int threads = 2;  // optimizer / norm threads (including the caller)
  // The storage tier of a registered model; null: RAM (storage/ram_tier.h).
  TierFactory make_tier;
  std::string storage_name = "ram";  // reported by Stats
  // Checkpoints are written to and restored from this directory; empty:
  // Checkpoint and Restore answer FAILED_PRECONDITION. `env` null: the
  // process's PosixEnv.
  std::string checkpoint_dir;
  // The newest complete checkpoints kept there (older ones are removed as
  // each new one completes); 0: all.
  uint32_t keep_checkpoints = 0;
  Env* env = nullptr;
  // With contributions_per_step > 1: gradient slots 1.. live in files in
  // this directory (storage/grad_slots.h); empty: in RAM (4 bytes per owned
  // element and slot).
  std::string grad_slot_dir;
};

// One commit applied or skipped by the store (the proto's CommitRecord).
struct LedgerEntry {
  uint64_t step = 0;           // the step committed (0-based)
  uint64_t epoch = 0;          // the epoch of its contributions
  uint64_t contributions = 0;  // push streams that made up its gradient
  bool skipped = false;
};

struct StoreStats {
  // The step ledger's.
  uint64_t step = 0;
  uint64_t optimizer_steps = 0;
  uint64_t epoch = 0;
  uint64_t contributions_applied = 0;
  uint64_t duplicates_ignored = 0;
  uint64_t elements_applied = 0;
  double last_step_seconds = 0;
  uint64_t restored_step = 0;
  // The workers' state of the last commit or restore.
  v1::TrainerState trainer_state;
  bool awaiting_restore = false;
  // With Stats(true): the commits that made the current state, oldest
  // first: steps ledger_first_step .. step-1, each once.
  std::vector<LedgerEntry> ledger;
  uint64_t ledger_first_step = 0;
  // The shard state's: the owned range, RAM held, the storage tier and its
  // I/O (zero in RAM).
  Range owned;
  uint64_t bytes_held = 0;
  std::string storage = "ram";
  uint64_t storage_bytes_read = 0;
  uint64_t storage_bytes_written = 0;
  double last_step_io_wait_seconds = 0;
  double last_step_io_bytes_per_second = 0;
  // The checkpointer's: complete checkpoints (newest first), MANIFESTs
  // written.
  std::vector<uint64_t> checkpoint_steps;
  uint64_t checkpoints_written = 0;
  // The store's.
  uint64_t requests_rejected = 0;
  uint64_t bytes_pushed = 0;
  uint64_t bytes_gathered = 0;
  // Random per store: a change tells clients the server restarted.
  uint64_t incarnation = 0;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_STORE_STORE_TYPES_H_
