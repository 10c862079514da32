// The shard server's storage flags (--storage=ram|nvme and the NVMe tier's
// aio/offload settings, named after DeepSpeed's config keys) and the
// start-up checks of the state directory.
//
// With --storage=nvme the state of shard k lives in --nvme_path/shard-k
// (created), locked by that directory's LOCK file for the life of the
// server. Restart semantics: a state directory that already holds a tier
// (MANIFEST) is verified and then refused — reopening a previous run's
// state needs the step counters that only Restore (issue 7) brings back, so
// the server never silently mixes old moments with a new run.
#ifndef ZEROSHARD_SERVER_STORAGE_FLAGS_H_
#define ZEROSHARD_SERVER_STORAGE_FLAGS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/flags.h"
#include "server/storage/dir_lock.h"
#include "server/storage/nvme_tier.h"
#include "server/store/shard_store.h"

namespace zeroshard {

struct StorageFlags {
  std::string storage = "ram";
  std::string nvme_path;
  int64_t aio_block_size = 1 << 20;
  int64_t aio_queue_depth = 32;
  int64_t aio_intra_op_parallelism = 1;
  int64_t sub_group_size = 1 << 21;
  int64_t buffer_count = 4;
  int64_t buffer_size = 0;
  int64_t read_cache_bytes = 64 << 20;
  bool grads_on_disk = true;
};

// Declares the flags on `flags`; `f` must outlive it.
void AddStorageFlags(FlagSet* flags, StorageFlags* f);

// Checks the flags (INVALID_ARGUMENT naming the flag or path: exit 2) and
// fills the tier options for shard `shard_index` (path = the state
// directory). Returns false in *nvme for --storage=ram. The numeric flags
// are range-checked with either storage.
absl::Status CheckStorageFlags(const StorageFlags& f, uint32_t shard_index,
                               bool* nvme, storage::NvmeOptions* options);

// OK when `dir` is empty, or once it is a directory in which a file can be
// created: missing directories are created (and parents, like mkdir -p),
// then a probe file is created and removed. Else INVALID_ARGUMENT naming
// --`flag` and the path (e.g. --checkpoint_dir /etc/passwd "is not a
// directory", /proc/x "cannot create /proc/x: ...").
absl::Status MakeWritableDir(const std::string& flag, const std::string& dir);

// Creates and locks options.path and refuses existing state (see above):
// FAILED_PRECONDITION for a lock held elsewhere or a previous run's state,
// DATA_LOSS and friends (naming the file) for corrupt state. With
// `restore_from` (the --checkpoint_dir holding a checkpoint or shutdown
// snapshot the server restores, which is authoritative) a previous run's
// state files are removed instead, and `log` gets one line saying so.
// Without one nothing is removed: the previous state is refused naming
// `checkpoint_dir` (where it was given and held nothing to restore).
absl::StatusOr<std::unique_ptr<storage::DirLock>> PrepareStateDir(
    const storage::NvmeOptions& options, const std::string& restore_from,
    const std::string& checkpoint_dir,
    const std::function<void(const std::string&)>& log);

// Sets store->make_tier to create an NvmeTier with `options` (plus the
// store's pool) and store->storage_name to "nvme".
void UseNvmeTier(const storage::NvmeOptions& options, StoreOptions* store);

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_STORAGE_FLAGS_H_
