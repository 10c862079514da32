// DirLock: an exclusive advisory lock (flock) on DIR/LOCK, held for the
// lifetime of the object, so that two servers never share one state
// directory. The lock dies with the process (a crashed server leaves no
// stale lock). The file holds the owner's pid, for the error message.
//
// Threading: create and destroy from one thread; the object has no other
// methods.
#ifndef ZEROSHARD_SERVER_STORAGE_DIR_LOCK_H_
#define ZEROSHARD_SERVER_STORAGE_DIR_LOCK_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace zeroshard {
namespace storage {

class DirLock {
 public:
  // Locks `dir`/LOCK (created if missing; `dir` must exist).
  // FAILED_PRECONDITION naming the file (and the holder's pid when known)
  // if another process holds it; the errno's code for other failures.
  static absl::StatusOr<std::unique_ptr<DirLock>> Acquire(
      const std::string& dir);
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

  const std::string& path() const { return path_; }

 private:
  DirLock(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  const std::string path_;
  const int fd_;
};

}  // namespace storage
}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_STORAGE_DIR_LOCK_H_
