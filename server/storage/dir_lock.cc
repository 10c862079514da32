#include "server/storage/dir_lock.h"

#include "absl/strings/str_cat.h"

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

}  // namespace storage
}  // namespace zeroshard
