#include "server/storage/dir_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace zeroshard {
namespace storage {

absl::StatusOr<std::unique_ptr<DirLock>> DirLock::Acquire(
    const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/LOCK");
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    return absl::ErrnoToStatus(err, absl::StrCat("cannot open ", path));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char text[32] = {0};
    const ssize_t n = pread(fd, text, sizeof(text) - 1, 0);
    close(fd);
    if (err != EWOULDBLOCK) {
      return absl::ErrnoToStatus(err, absl::StrCat("cannot lock ", path));
    }
    int64_t pid = 0;
    const bool known =
        n > 0 && absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &pid);
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is locked by another zeroshard-server",
                     known ? absl::StrCat(" (pid ", pid, ")") : std::string(),
                     "; each server needs its own state directory"));
  }
  const std::string pid = absl::StrCat(getpid(), "\n");
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) !=
                                   static_cast<ssize_t>(pid.size())) {
    const int err = errno;
    close(fd);
    return absl::ErrnoToStatus(err, absl::StrCat("cannot write ", path));
  }
  return std::unique_ptr<DirLock>(new DirLock(path, fd));
}

DirLock::~DirLock() { close(fd_); }

}  // namespace storage
}  // namespace zeroshard
