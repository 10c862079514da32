// Small POSIX file helpers shared by the llm.c file readers and writers:
// a read-only file read with pread straight into the caller's memory, a
// writer that builds a file under a temporary name and renames it into
// place only when everything was written (no half-written file on error),
// and the checks of llm.c's 256-int32 header.
//
// Errors name the file: NOT_FOUND for a missing file, the errno's code for
// other open/read/write failures, DATA_LOSS for a short read (the file
// ended early).
//
// Threading: one object per thread; distinct objects are independent.
// PRead on one ReadOnlyFile may be called from several threads (pread has
// no shared offset).
#ifndef ZEROSHARD_WORKER_IO_FILE_UTIL_H_
#define ZEROSHARD_WORKER_IO_FILE_UTIL_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace zeroshard::io {

class ReadOnlyFile {
 public:
  // Opens `path` and records its size. NOT_FOUND if it does not exist,
  // INVALID_ARGUMENT if it is a directory.
  static absl::StatusOr<ReadOnlyFile> Open(const std::string& path);

  ReadOnlyFile(ReadOnlyFile&& other) noexcept;
  ReadOnlyFile& operator=(ReadOnlyFile&& other) noexcept;
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;
  ~ReadOnlyFile();

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }

  // Reads exactly `n` bytes at `offset` into `dst` (looping over short
  // reads). DATA_LOSS naming the file if it ends first.
  absl::Status PRead(uint64_t offset, size_t n, void* dst) const;

 private:
  ReadOnlyFile(std::string path, int fd, uint64_t size)
      : path_(std::move(path)), fd_(fd), size_(size) {}
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// Writes a file atomically: bytes go to a temporary file in the same
// directory ("<path>.tmp.XXXXXX"); Commit() flushes, fsyncs and renames it
// over `path`. Destroying an uncommitted writer removes the temporary file,
// so a failed write leaves `path` as it was.
class AtomicFileWriter {
 public:
  static absl::StatusOr<AtomicFileWriter> Create(const std::string& path);

  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter();

  const std::string& path() const { return path_; }
  // Bytes appended so far.
  uint64_t written() const { return written_; }

  absl::Status Append(const void* data, size_t n);
  // Makes the file visible under path(). The writer is spent afterwards.
  absl::Status Commit();

 private:
  AtomicFileWriter(std::string path, std::string temp, int fd)
      : path_(std::move(path)), temp_(std::move(temp)), fd_(fd) {}
  void Abandon();
  std::string path_;
  std::string temp_;
  int fd_ = -1;
  uint64_t written_ = 0;
};

// llm.c's files begin with a header of 256 little-endian int32s: magic,
// version, then format-specific fields.
inline constexpr int kHeaderInts = 256;
inline constexpr uint64_t kHeaderBytes = kHeaderInts * sizeof(int32_t);
using FileHeader = std::array<int32_t, kHeaderInts>;

// Reads the header of `file` and checks its magic. `kind` names the format
// in messages ("llm.c model file"). DATA_LOSS if the file is shorter than
// the header, INVALID_ARGUMENT if header[0] != magic.
absl::StatusOr<FileHeader> ReadHeader(const ReadOnlyFile& file, int32_t magic,
                                      const char* kind);

// OK if the file is exactly `expected` bytes long, else DATA_LOSS saying
// whether it is truncated or has trailing bytes; `why` explains where
// `expected` comes from ("header: 1000 tokens").
absl::Status CheckFileSize(const ReadOnlyFile& file, uint64_t expected,
                           const std::string& why);

}  // namespace zeroshard::io

#endif  // ZEROSHARD_WORKER_IO_FILE_UTIL_H_
