// DirLock: an exclusive lock on DIR/LOCK (Env::LockFile: flock, the
// holder's pid in the file), held for the lifetime of the object, so that
// two servers never share one state directory. The lock dies with the
// process (a crashed server leaves no stale lock).
//
// Threading: create and destroy from one thread; the object has no other
// methods. Ownership: `env` must outlive the lock.
#ifndef ZEROSHARD_SERVER_STORAGE_DIR_LOCK_H_
#define ZEROSHARD_SERVER_STORAGE_DIR_LOCK_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/env/env.h"

namespace zeroshard {
namespace storage {

class DirLock {
 public:
  // Locks `dir`/LOCK (created if missing; `dir` must exist).
  // FAILED_PRECONDITION naming the file (and the holder's pid when known)
  // if another process holds it; the errno's code for other failures.
  static absl::StatusOr<std::unique_ptr<DirLock>> Acquire(
      const std::string& dir, Env* env = DefaultEnv());

  // The lock of shard `shard_index` on a --checkpoint_dir, which the
  // servers of one job share (a file each: LOCK.shard-<k>), so that a
  // second job's server of that shard is refused rather than mixing the two
  // jobs' checkpoints. Waits up to `wait` for a holder that is exiting (a
  // server being replaced); then FAILED_PRECONDITION naming the file, the
  // holder's pid and what to do.
  static absl::StatusOr<std::unique_ptr<DirLock>> AcquireCheckpointDir(
      const std::string& dir, uint32_t shard_index, absl::Duration wait,
      Env* env = DefaultEnv());

  const std::string& path() const { return lock_->path(); }

 private:
  explicit DirLock(std::unique_ptr<FileLock> lock) : lock_(std::move(lock)) {}
  const std::unique_ptr<FileLock> lock_;
};

}  // namespace storage
}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_STORAGE_DIR_LOCK_H_
