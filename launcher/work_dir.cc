#include "launcher/work_dir.h"

#include "absl/strings/str_cat.h"

namespace zeroshard {

absl::StatusOr<std::unique_ptr<FileLock>> LockWorkDir(Env* env,
                                                      const std::string& dir) {
  absl::StatusOr<std::unique_ptr<FileLock>> lock = env->LockFile(dir + "/LOCK");
  if (lock.ok()) return lock;
  const absl::Status& s = lock.status();
  if (s.code() != absl::StatusCode::kFailedPrecondition) {
    return absl::Status(s.code(),
                        absl::StrCat("--work_dir ", dir, ": ", s.message()));
  }
  // Env's message: "PATH is locked (held by pid N)", the pid if known.
  std::string holder;
  const size_t pid = s.message().find("(held by pid ");
  if (pid != absl::string_view::npos) {
    holder = absl::StrCat(" (", s.message().substr(pid + 9));  // "(pid N)"
  }
  return absl::FailedPreconditionError(
      absl::StrCat("--work_dir ", dir, " is in use by another run", holder,
                   ": give another --work_dir, or wait for that run to end"));
}

}  // namespace zeroshard
