#include "server/storage/dir_lock.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace zeroshard {
namespace storage {

absl::StatusOr<std::unique_ptr<DirLock>> DirLock::Acquire(
    const std::string& dir, Env* env) {
  absl::StatusOr<std::unique_ptr<FileLock>> lock =
      env->LockFile(JoinPath(dir, "LOCK"));
  if (absl::IsFailedPrecondition(lock.status())) {
    return absl::FailedPreconditionError(
        absl::StrCat(lock.status().message(),
                     ": another zeroshard-server uses this state directory "
                     "(each server needs its own)"));
  }
  if (!lock.ok()) return lock.status();
  return std::unique_ptr<DirLock>(new DirLock(std::move(lock).value()));
}

absl::StatusOr<std::unique_ptr<DirLock>> DirLock::AcquireCheckpointDir(
    const std::string& dir, uint32_t shard_index, absl::Duration wait,
    Env* env) {
  const std::string path =
      JoinPath(dir, absl::StrFormat("LOCK.shard-%05u", shard_index));
  const absl::Time give_up = absl::Now() + wait;
  for (;;) {
    absl::StatusOr<std::unique_ptr<FileLock>> lock = env->LockFile(path);
    if (lock.ok()) {
      return std::unique_ptr<DirLock>(new DirLock(std::move(lock).value()));
    }
    if (!absl::IsFailedPrecondition(lock.status())) return lock.status();
    if (absl::Now() >= give_up) {
      return absl::FailedPreconditionError(absl::StrCat(
          lock.status().message(), ": another zeroshard-server of shard ",
          shard_index,
          " uses this --checkpoint_dir (a second job there would mix the two "
          "jobs' checkpoints: give each job its own directory, or stop the "
          "other server)"));
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
}

}  // namespace storage
}  // namespace zeroshard
