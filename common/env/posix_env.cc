// PosixEnv: the real Env. Files use pread/pwrite/fallocate/fdatasync and
// O_DIRECT where the file system allows it; queues use io_uring (liburing),
// or synchronous I/O when the kernel refuses io_uring (seccomp, old kernel).
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <linux/fs.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/env/env.h"
#include "common/status_macros.h"

namespace zeroshard {
namespace {

absl::Status ErrnoStatus(int err, const std::string& what) {
  const std::string msg = absl::StrCat(what, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(msg);
    case EEXIST:
      return absl::AlreadyExistsError(msg);
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      return absl::ResourceExhaustedError(msg);
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(msg);
    case EINVAL:
    case EISDIR:
      return absl::InvalidArgumentError(msg);
    default:
      return absl::InternalError(msg);
  }
}

class PosixFile : public File {
 public:
  PosixFile(std::string path, int fd, bool direct)
      : path_(std::move(path)), fd_(fd), direct_(direct) {}
  ~PosixFile() override { close(fd_); }

  const std::string& path() const override { return path_; }
  bool direct() const override { return direct_; }
  int fd() const { return fd_; }

  absl::Status Read(uint64_t offset, void* buf, size_t n) override {
    char* p = static_cast<char*>(buf);
    while (n > 0) {
      const ssize_t r = pread(fd_, p, n, static_cast<off_t>(offset));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        return ErrnoStatus(errno, absl::StrCat("read ", path_, " at ", offset));
      }
      if (r == 0) {
        return absl::DataLossError(absl::StrCat(
            "read ", path_, " at ", offset, ": file ends ", n, " bytes early"));
      }
      p += r;
      offset += r;
      n -= r;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<size_t> ReadUpTo(uint64_t offset, void* buf,
                                  size_t n) override {
    char* p = static_cast<char*>(buf);
    size_t done = 0;
    while (done < n) {
      const ssize_t r =
          pread(fd_, p + done, n - done, static_cast<off_t>(offset + done));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        return ErrnoStatus(errno,
                           absl::StrCat("read ", path_, " at ", offset + done));
      }
      if (r == 0) break;
      done += static_cast<size_t>(r);
    }
    return done;
  }

  absl::Status Write(uint64_t offset, const void* buf, size_t n) override {
    const char* p = static_cast<const char*>(buf);
    while (n > 0) {
      const ssize_t r = pwrite(fd_, p, n, static_cast<off_t>(offset));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        return ErrnoStatus(r < 0 ? errno : EIO,
                           absl::StrCat("write ", path_, " at ", offset));
      }
      p += r;
      offset += r;
      n -= r;
    }
    return absl::OkStatus();
  }

  absl::Status Allocate(uint64_t size) override {
    const int r = posix_fallocate(fd_, 0, static_cast<off_t>(size));
    if (r != 0) {
      return ErrnoStatus(r,
                         absl::StrCat("allocate ", size, " bytes for ", path_));
    }
    return absl::OkStatus();
  }

  absl::Status Sync() override {
    if (fdatasync(fd_) != 0) {
      return ErrnoStatus(errno, absl::StrCat("fdatasync ", path_));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> Size() override {
    struct stat st;
    if (fstat(fd_, &st) != 0) {
      return ErrnoStatus(errno, absl::StrCat("stat ", path_));
    }
    return static_cast<uint64_t>(st.st_size);
  }

 private:
  const std::string path_;
  const int fd_;
  const bool direct_;
};

// io_uring queue: one ring, requests identified by their slot.
class UringQueue : public IoQueue {
 public:
  UringQueue(int depth) : depth_(depth), slots_(depth), free_(depth) {
    for (int i = 0; i < depth; ++i) free_[i] = depth - 1 - i;
  }
  ~UringQueue() override {
    IoCompletion c[16];
    while (in_flight_ > 0) {
      if (!Reap(true, c, 16).ok()) break;
    }
    if (ready_) io_uring_queue_exit(&ring_);
  }
  int Init() {
    const int r = io_uring_queue_init(static_cast<unsigned>(depth_), &ring_, 0);
    ready_ = r == 0;
    return r;
  }

  int depth() const override { return depth_; }
  int in_flight() const override { return in_flight_; }

  absl::Status Submit(const IoRequest& r) override {
    if (free_.empty()) return absl::FailedPreconditionError("I/O queue full");
    struct io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) return absl::InternalError("io_uring: no free sqe");
    const int fd = static_cast<PosixFile*>(r.file)->fd();
    if (r.op == IoOp::kRead) {
      io_uring_prep_read(sqe, fd, r.buf, static_cast<unsigned>(r.len),
                         r.offset);
    } else {
      io_uring_prep_write(sqe, fd, r.buf, static_cast<unsigned>(r.len),
                          r.offset);
    }
    const int slot = free_.back();
    free_.pop_back();
    slots_[slot] = r;
    io_uring_sqe_set_data64(sqe, static_cast<uint64_t>(slot));
    const int s = io_uring_submit(&ring_);
    if (s < 0) {
      free_.push_back(slot);
      return ErrnoStatus(-s, "io_uring_submit");
    }
    ++in_flight_;
    return absl::OkStatus();
  }

  absl::StatusOr<int> Reap(bool wait, IoCompletion* out, int max) override {
    int n = 0;
    while (n < max && in_flight_ > 0) {
      struct io_uring_cqe* cqe = nullptr;
      int r = (wait && n == 0) ? io_uring_wait_cqe(&ring_, &cqe)
                               : io_uring_peek_cqe(&ring_, &cqe);
      if (r == -EINTR) continue;
      if (r == -EAGAIN || cqe == nullptr) break;
      if (r < 0) return ErrnoStatus(-r, "io_uring_wait_cqe");
      const int slot = static_cast<int>(io_uring_cqe_get_data64(cqe));
      const int res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      const IoRequest& q = slots_[slot];
      IoCompletion& c = out[n++];
      c.tag = q.tag;
      const char* verb = q.op == IoOp::kRead ? "read " : "write ";
      if (res < 0) {
        c.status = ErrnoStatus(-res, absl::StrCat(verb, q.file->path(), " at ",
                                                  q.offset, " (io_uring)"));
      } else if (static_cast<size_t>(res) != q.len) {
        c.status = absl::DataLossError(absl::StrCat(
            verb, q.file->path(), " at ", q.offset, ": ", res, " of ", q.len,
            " bytes transferred (file too short?)"));
      } else {
        c.status = absl::OkStatus();
      }
      free_.push_back(slot);
      --in_flight_;
    }
    return n;
  }

 private:
  const int depth_;
  struct io_uring ring_;
  bool ready_ = false;
  int in_flight_ = 0;
  std::vector<IoRequest> slots_;
  std::vector<int> free_;
};

// Holds an flock(2) on its file descriptor; closing it releases the lock.
class PosixFileLock : public FileLock {
 public:
  PosixFileLock(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixFileLock() override { close(fd_); }
  const std::string& path() const override { return path_; }

 private:
  const std::string path_;
  const int fd_;
};

absl::Status IsDirectoryError(const std::string& path) {
  return absl::InvalidArgumentError(
      absl::StrCat("open ", path, ": is a directory, not a file"));
}

class PosixEnv : public Env {
 public:
  absl::StatusOr<std::unique_ptr<File>> OpenFile(
      const std::string& path, const OpenOptions& o) override {
    int flags = O_CLOEXEC | (o.read_only ? O_RDONLY : O_RDWR);
    if (o.create) flags |= O_CREAT;
    if (o.create && o.exclusive) flags |= O_EXCL;
    if (o.truncate && !o.read_only) flags |= O_TRUNC;
    int fd = -1;
    bool direct = false;
    if (o.direct) {
      fd = open(path.c_str(), flags | O_DIRECT, 0600);
      direct = fd >= 0;
      if (fd < 0 && errno == EINVAL) {
        if (!warned_direct_.exchange(true)) {
          std::fprintf(stderr,
                       "storage: the file system of %s refuses O_DIRECT "
                       "(EINVAL); falling back to buffered I/O through the "
                       "page cache (bandwidth figures include caching)\n",
                       path.c_str());
        }
      } else if (fd < 0) {
        return ErrnoStatus(errno, absl::StrCat("open ", path));
      }
    }
    if (fd < 0) fd = open(path.c_str(), flags, 0600);
    if (fd < 0 && errno == EISDIR) return IsDirectoryError(path);
    if (fd < 0) return ErrnoStatus(errno, absl::StrCat("open ", path));
    // O_RDONLY opens a directory; reading it would fail later, less clearly.
    struct stat st;
    if (o.read_only && fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
      close(fd);
      return IsDirectoryError(path);
    }
    return std::unique_ptr<File>(new PosixFile(path, fd, direct));
  }

  absl::StatusOr<std::unique_ptr<File>> OpenFileIn(
      const std::string& dir, const std::string& name,
      const OpenOptions& o) override;

  absl::StatusOr<std::unique_ptr<IoQueue>> NewIoQueue(int depth) override {
    auto q = std::make_unique<UringQueue>(depth);
    const int r = q->Init();
    if (r == 0) return std::unique_ptr<IoQueue>(std::move(q));
    if (!warned_uring_.exchange(true)) {
      std::fprintf(stderr,
                   "storage: io_uring unavailable (%s); using synchronous "
                   "pread/pwrite per I/O thread\n",
                   std::strerror(-r));
    }
    return NewSyncIoQueue(depth);
  }

  absl::Status CreateDir(const std::string& path) override {
    if (mkdir(path.c_str(), 0700) == 0) return absl::OkStatus();
    const int err = errno;
    struct stat st;
    if (err == EEXIST && stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      return absl::OkStatus();
    }
    return ErrnoStatus(err, absl::StrCat("create directory ", path));
  }

  absl::Status RemoveFile(const std::string& path) override {
    if (unlink(path.c_str()) != 0) {
      return ErrnoStatus(errno, absl::StrCat("remove ", path));
    }
    return absl::OkStatus();
  }

  absl::Status RemoveDir(const std::string& path) override {
    if (rmdir(path.c_str()) == 0) return absl::OkStatus();
    const int err = errno;
    if (err == ENOTEMPTY || err == EEXIST) {
      return absl::FailedPreconditionError(
          absl::StrCat("remove directory ", path, ": not empty"));
    }
    return ErrnoStatus(err, absl::StrCat("remove directory ", path));
  }

  absl::Status RenameFile(const std::string& from,
                          const std::string& to) override {
    if (rename(from.c_str(), to.c_str()) != 0) {
      return ErrnoStatus(errno, absl::StrCat("rename ", from, " to ", to));
    }
    return absl::OkStatus();
  }

  absl::Status LinkFile(const std::string& from,
                        const std::string& to) override {
    if (link(from.c_str(), to.c_str()) == 0) return absl::OkStatus();
    const int err = errno;
    const std::string what = absl::StrCat("link ", from, " to ", to);
    if (err == EXDEV || err == EPERM || err == EOPNOTSUPP) {
      return absl::UnimplementedError(
          absl::StrCat(what, ": ", std::strerror(err)));
    }
    return ErrnoStatus(err, what);
  }

  absl::Status CopyFile(const std::string& from,
                        const std::string& to) override;

  absl::StatusOr<std::vector<std::string>> ListDir(
      const std::string& path) override {
    DIR* d = opendir(path.c_str());
    if (d == nullptr) return ErrnoStatus(errno, absl::StrCat("list ", path));
    std::vector<std::string> names;
    while (struct dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(n);
    }
    closedir(d);
    return names;
  }

  absl::Status SyncDir(const std::string& path) override {
    const int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus(errno, absl::StrCat("open dir ", path));
    const int r = fsync(fd);
    const int err = errno;
    close(fd);
    if (r != 0) return ErrnoStatus(err, absl::StrCat("fsync dir ", path));
    return absl::OkStatus();
  }

  bool FileExists(const std::string& path) override {
    return access(path.c_str(), F_OK) == 0;
  }

  absl::StatusOr<uint64_t> FreeBytes(const std::string& path) override {
    struct statvfs s;
    if (statvfs(path.c_str(), &s) != 0) {
      return ErrnoStatus(errno, absl::StrCat("statvfs ", path));
    }
    return static_cast<uint64_t>(s.f_bavail) * s.f_frsize;
  }

  absl::StatusOr<std::unique_ptr<FileLock>> LockFile(
      const std::string& path) override;

 private:
  std::atomic<bool> warned_direct_{false};
  std::atomic<bool> warned_uring_{false};
};

absl::StatusOr<std::unique_ptr<File>> PosixEnv::OpenFileIn(
    const std::string& dir, const std::string& name, const OpenOptions& o) {
  const std::string path = JoinPath(dir, name);
  auto refused = [&](const std::string& what, const char* why) {
    return absl::FailedPreconditionError(
        absl::StrCat("open ", what, ": ", why));
  };
  if (!IsPlainName(name)) return refused(path, "not a plain file name");
  const int dfd =
      open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0 && errno == ENOENT) {
    return ErrnoStatus(errno, absl::StrCat("open directory ", dir));
  }
  if (dfd < 0) {
    return refused(dir, "not a directory (a symbolic link?)");
  }
  int flags =
      O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | (o.read_only ? O_RDONLY : O_RDWR);
  if (o.create) flags |= O_CREAT;
  if (o.create && o.exclusive) flags |= O_EXCL;
  if (o.truncate && !o.read_only) flags |= O_TRUNC;
  const int fd = openat(dfd, name.c_str(), flags, 0600);
  const int err = errno;
  close(dfd);
  if (fd < 0 && (err == ENOENT || err == EEXIST || err == ENOSPC ||
                 err == EDQUOT || err == EACCES || err == EROFS)) {
    return ErrnoStatus(err, absl::StrCat("open ", path));
  }
  if (fd < 0) return refused(path, "not a regular file (a symbolic link?)");
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
    close(fd);
    return refused(path, "not a regular file");
  }
  return std::unique_ptr<File>(new PosixFile(path, fd, false));
}

absl::Status PosixEnv::CopyFile(const std::string& from,
                                const std::string& to) {
  const int in = open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return ErrnoStatus(errno, absl::StrCat("open ", from));
  const int out =
      open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (out < 0) {
    const int err = errno;
    close(in);
    return ErrnoStatus(err, absl::StrCat("create ", to));
  }
  absl::Status s;
  // Reflink (btrfs, xfs): shares the extents, copies nothing.
  if (ioctl(out, FICLONE, in) != 0) {
    struct stat st;
    fstat(in, &st);
    off_t left = st.st_size;
    while (left > 0) {
      const ssize_t r = copy_file_range(in, nullptr, out, nullptr,
                                        static_cast<size_t>(left), 0);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        s = ErrnoStatus(r < 0 ? errno : EIO,
                        absl::StrCat("copy_file_range ", from, " to ", to));
        break;
      }
      left -= r;
    }
    if (s.ok() && fdatasync(out) != 0) {
      s = ErrnoStatus(errno, absl::StrCat("fdatasync ", to));
    }
  }
  close(in);
  close(out);
  return s;
}

absl::StatusOr<std::unique_ptr<FileLock>> PosixEnv::LockFile(
    const std::string& path) {
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("open ", path));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char text[32] = {0};
    const ssize_t n = pread(fd, text, sizeof(text) - 1, 0);
    close(fd);
    if (err != EWOULDBLOCK) {
      return ErrnoStatus(err, absl::StrCat("lock ", path));
    }
    int64_t pid = 0;
    const bool known =
        n > 0 && absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &pid);
    return absl::FailedPreconditionError(absl::StrCat(
        path, " is locked",
        known ? absl::StrCat(" (held by pid ", pid, ")") : std::string()));
  }
  const std::string pid = absl::StrCat(getpid(), "\n");
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) !=
                                   static_cast<ssize_t>(pid.size())) {
    const int err = errno;
    close(fd);
    return ErrnoStatus(err, absl::StrCat("write ", path));
  }
  return std::unique_ptr<FileLock>(new PosixFileLock(path, fd));
}

}  // namespace

Env* DefaultEnv() {
  static Env* env = new PosixEnv;
  return env;
}

}  // namespace zeroshard
