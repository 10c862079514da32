// UniqueFd: owns a POSIX file descriptor and closes it when it goes (-1:
// none). Movable, not copyable. Thread-compatible.
#ifndef ZEROSHARD_COMMON_UNIQUE_FD_H_
#define ZEROSHARD_COMMON_UNIQUE_FD_H_

#include <unistd.h>

#include <utility>

namespace zeroshard {

class UniqueFd {
 public:
  explicit UniqueFd(int fd = -1) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_UNIQUE_FD_H_
