// Every file operation of zeroshard, behind one small interface (LevelDB's
// Env): files with positional I/O, an asynchronous I/O queue, file locks,
// and the few directory operations callers need. Implementations:
//   PosixEnv (DefaultEnv()) the real one: O_DIRECT files, io_uring queues
//   MemEnv   (mem_env.h)    an in-memory fake for hermetic tests
//   FaultEnv (fault_env.h)  a wrapper that injects ENOSPC, EIO, lost syncs
//
// Start here (code outside common/env does no file I/O of its own;
// //tests:direct_io_test, tools/direct_io_check.sh, keeps it so):
//   whole small files   ReadSmallFile (to EOF: /proc works), WriteFileAtomic
//   large files         ReadOnlyFile (sized, positional reads) and
//                       AtomicFileWriter (streamed, renamed into place on
//                       Commit), in files.h
//   logs, JSON lines    AppendableFile (files.h); ReadFileFrom to follow
//   "one process per directory"  Env::LockFile
//   file name patterns  Glob (files.h)
// Every function takes the Env* to use; pass DefaultEnv() in production and
// a MemEnv or FaultEnv in tests.
//
// Modes: files an Env creates are 0600 and directories 0700 (the umask
// can only narrow them), whatever the process's umask: what zeroshard
// writes (checkpoints, tier files, locks, logs) is private to its user.
//
// Errors: every call returns a non-OK absl::Status whose message names the
// path and the operation; codes follow errno (ENOENT -> NOT_FOUND, ENOSPC ->
// RESOURCE_EXHAUSTED, EACCES/EROFS/EPERM -> PERMISSION_DENIED, a directory
// opened as a file -> INVALID_ARGUMENT, short read past the end ->
// DATA_LOSS, other I/O errors -> INTERNAL).
//
// Threading: an Env and its File objects are thread-safe (positional I/O
// only). An IoQueue is used by one thread at a time.
#ifndef ZEROSHARD_COMMON_ENV_ENV_H_
#define ZEROSHARD_COMMON_ENV_ENV_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace zeroshard {

// Alignment of buffers, offsets and lengths for files opened with O_DIRECT.
inline constexpr uint64_t kIoAlign = 4096;

inline constexpr uint64_t AlignUp(uint64_t x, uint64_t a) {
  return (x + a - 1) / a * a;
}

class File {
 public:
  virtual ~File() = default;
  virtual const std::string& path() const = 0;
  // True when the file bypasses the page cache (O_DIRECT): buffers, offsets
  // and lengths of Read/Write and IoQueue requests must be kIoAlign-aligned.
  virtual bool direct() const = 0;

  // Reads exactly n bytes at offset into buf; DATA_LOSS if the file ends
  // first.
  virtual absl::Status Read(uint64_t offset, void* buf, size_t n) = 0;
  // Reads up to n bytes at offset into buf and returns how many it read:
  // fewer than n only at the end of the file, 0 at or past it. For files
  // whose Size() says nothing (/proc reports 0).
  virtual absl::StatusOr<size_t> ReadUpTo(uint64_t offset, void* buf,
                                          size_t n) = 0;
  // Writes exactly n bytes at offset (extending the file if needed).
  virtual absl::Status Write(uint64_t offset, const void* buf, size_t n) = 0;
  // Reserves [0, size) on the device (fallocate); the file is at least
  // `size` bytes afterwards and new bytes read as zeros. RESOURCE_EXHAUSTED
  // when the device is full.
  virtual absl::Status Allocate(uint64_t size) = 0;
  // Makes written data durable (fdatasync).
  virtual absl::Status Sync() = 0;
  virtual absl::StatusOr<uint64_t> Size() = 0;
};

enum class IoOp { kRead, kWrite };

// One asynchronous transfer of exactly `len` bytes. `file` must come from
// the Env that made the queue; buf must stay valid until its completion.
struct IoRequest {
  IoOp op = IoOp::kRead;
  File* file = nullptr;
  uint64_t offset = 0;
  void* buf = nullptr;
  size_t len = 0;
  uint64_t tag = 0;  // returned in the completion
};

struct IoCompletion {
  uint64_t tag = 0;
  absl::Status status;  // OK when all len bytes were transferred
};

// A submission/completion queue (io_uring, or synchronous in fakes).
// Used by one thread at a time; destroying it waits for requests in flight.
class IoQueue {
 public:
  virtual ~IoQueue() = default;
  virtual int depth() const = 0;
  virtual int in_flight() const = 0;
  // Starts one request. Precondition: in_flight() < depth(). An error here
  // means the request was not started (no completion will come).
  virtual absl::Status Submit(const IoRequest& request) = 0;
  // Collects up to `max` completions into `out`; with `wait` blocks until at
  // least one is available (returns 0 at once when nothing is in flight).
  virtual absl::StatusOr<int> Reap(bool wait, IoCompletion* out, int max) = 0;
};

struct OpenOptions {
  bool create = false;     // create if missing
  bool exclusive = false;  // with create: ALREADY_EXISTS if present
  bool truncate = false;   // empty an existing file (not with read_only)
  bool direct = false;     // ask for O_DIRECT (see Env::OpenFile)
  bool read_only = false;
};

// A lock taken by Env::LockFile, held until the object is destroyed (or
// the process dies). Must not outlive the Env that made it.
class FileLock {
 public:
  virtual ~FileLock() = default;
  virtual const std::string& path() const = 0;
};

class Env {
 public:
  virtual ~Env() = default;

  // Opens `path`. With options.direct the file bypasses the page cache when
  // the file system allows; when it refuses O_DIRECT (EINVAL: tmpfs on old
  // kernels, overlayfs, ...) the file is opened buffered and direct() is
  // false (PosixEnv logs this once per Env). A directory is
  // INVALID_ARGUMENT ("open PATH: is a directory, not a file").
  virtual absl::StatusOr<std::unique_ptr<File>> OpenFile(
      const std::string& path, const OpenOptions& options) = 0;
  // Opens `name` inside the directory `dir` without following symbolic
  // links: `dir` must be a directory and not a symbolic link itself (the
  // directories above it may be), `name` a plain name (no '/', not "" or
  // "." or ".."), and the file a regular file, not a link. Never blocks on
  // a FIFO. options.direct is ignored (buffered I/O). NOT_FOUND when `dir`
  // or the file does not exist; FAILED_PRECONDITION naming the path for a
  // name that is not plain, a link, or anything but a regular file (PosixEnv:
  // openat(2) with O_NOFOLLOW on `dir` opened O_DIRECTORY | O_NOFOLLOW).
  // The default checks the name and calls OpenFile (fakes have no links).
  virtual absl::StatusOr<std::unique_ptr<File>> OpenFileIn(
      const std::string& dir, const std::string& name,
      const OpenOptions& options);
  // A queue with room for `depth` requests in flight.
  virtual absl::StatusOr<std::unique_ptr<IoQueue>> NewIoQueue(int depth) = 0;

  // Creates one directory level; OK if it already exists as a directory.
  virtual absl::Status CreateDir(const std::string& path) = 0;
  virtual absl::Status RemoveFile(const std::string& path) = 0;
  // Removes an empty directory: NOT_FOUND when missing, FAILED_PRECONDITION
  // when it holds anything.
  virtual absl::Status RemoveDir(const std::string& path) = 0;
  // Atomically replaces `to` (rename(2)).
  virtual absl::Status RenameFile(const std::string& from,
                                  const std::string& to) = 0;
  // Hard link; UNIMPLEMENTED when `to` is on another file system (EXDEV) or
  // links are not supported, so callers can fall back to CopyFile.
  virtual absl::Status LinkFile(const std::string& from,
                                const std::string& to) = 0;
  // Copies a whole file without passing it through user-space memory where
  // the OS can (reflink via FICLONE, else copy_file_range).
  virtual absl::Status CopyFile(const std::string& from,
                                const std::string& to) = 0;
  // Names (not paths) of the entries of a directory, without "." and "..".
  virtual absl::StatusOr<std::vector<std::string>> ListDir(
      const std::string& path) = 0;
  // Makes renames and creations inside `path` durable.
  virtual absl::Status SyncDir(const std::string& path) = 0;
  virtual bool FileExists(const std::string& path) = 0;
  // Bytes available to this process on the file system holding `path`.
  virtual absl::StatusOr<uint64_t> FreeBytes(const std::string& path) = 0;
  // Takes an exclusive lock on `path` (created if missing, its directory
  // must exist), so that two processes never use the same files: flock(2),
  // released when the lock is destroyed or the process dies, so a crash
  // leaves no stale lock. The holder's pid is written into the file.
  // FAILED_PRECONDITION "PATH is locked (held by pid N)" while another
  // lock (of this or another process) holds it; the errno's code for other
  // failures.
  virtual absl::StatusOr<std::unique_ptr<FileLock>> LockFile(
      const std::string& path) = 0;
};

// The process-wide PosixEnv (never destroyed).
Env* DefaultEnv();

// Small-file helpers (buffered, not O_DIRECT). WriteFileAtomic writes
// `path`.tmp, syncs it, renames it over `path` and syncs the directory, so a
// crash leaves either the old or the new contents; on error `path` is as it
// was. (A fixed temporary name: one writer per path; AtomicFileWriter in
// files.h streams and takes a unique one.)
absl::Status WriteFileAtomic(Env* env, const std::string& path,
                             absl::string_view contents);

// The whole file, read to its end (not to its reported size, so /proc files
// work). DATA_LOSS naming the path when it holds more than `max_bytes`.
inline constexpr size_t kMaxSmallFileBytes = size_t{64} << 20;
absl::StatusOr<std::string> ReadSmallFile(
    Env* env, const std::string& path, size_t max_bytes = kMaxSmallFileBytes);

// The bytes of `path` from `offset` on, at most `max_bytes` of them: fewer
// only at the end of the file (read to EOF, like ReadSmallFile), "" at or
// past it. For files that grow while read (logs).
absl::StatusOr<std::string> ReadFileFrom(Env* env, const std::string& path,
                                         uint64_t offset, size_t max_bytes);

// True for a plain file name: not empty, ".", "..", and without '/' or NUL.
bool IsPlainName(const std::string& name);

// "dir/name".
std::string JoinPath(const std::string& dir, const std::string& name);

// The directory `path` is in: "." for a bare name, "/" for a file at the
// root ("a/b" -> "a", "b" -> ".", "/b" -> "/").
std::string DirOf(const std::string& path);

// A queue that performs each request synchronously inside Submit() with
// File::Read/Write; completions are returned by Reap(). Works with any File
// (used by MemEnv and as PosixEnv's fallback when io_uring is unavailable).
std::unique_ptr<IoQueue> NewSyncIoQueue(int depth);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_ENV_ENV_H_
