// Whole-file helpers on top of an Env (env.h), for code that reads and
// writes ordinary files rather than a storage tier's blocks: all buffered
// (never O_DIRECT), all naming the path in every error (the Env's messages).
//
//   ReadOnlyFile      a file opened for positional reads, its size taken at
//                     open (llm.c model and token files check it up front)
//   AtomicFileWriter  a file streamed under a unique temporary name and
//                     renamed over its path only on Commit()
//   AppendableFile    a file written front to back (logs, JSON lines)
//   Glob              the paths matching a shell pattern, sorted
//
// Example:
//   ZS_ASSIGN_OR_RETURN(AtomicFileWriter w,
//                       AtomicFileWriter::Create(env, "out/model.bin"));
//   ZS_RETURN_IF_ERROR(w.Append(header, sizeof(header)));
//   ZS_RETURN_IF_ERROR(w.Append(params, bytes));
//   ZS_RETURN_IF_ERROR(w.Commit());  // until here, out/model.bin is as it was
//
// Ownership: every object keeps the Env* it was made with; the Env must
// outlive it. Threading: ReadOnlyFile::Read may be called from several
// threads at once (positional reads); the writers are used by one thread
// at a time.
#ifndef ZEROSHARD_COMMON_ENV_FILES_H_
#define ZEROSHARD_COMMON_ENV_FILES_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/env/env.h"

namespace zeroshard {

class ReadOnlyFile {
 public:
  // Opens `path` and records its size: NOT_FOUND if it does not exist,
  // INVALID_ARGUMENT if it is a directory, the errno's code otherwise.
  static absl::StatusOr<ReadOnlyFile> Open(Env* env, const std::string& path);

  const std::string& path() const { return file_->path(); }
  // The size at Open().
  uint64_t size() const { return size_; }

  // Reads exactly n bytes at offset into dst; DATA_LOSS naming the file if
  // it ends first.
  absl::Status Read(uint64_t offset, void* dst, size_t n) const {
    return file_->Read(offset, dst, n);
  }

 private:
  ReadOnlyFile(std::unique_ptr<File> file, uint64_t size)
      : file_(std::move(file)), size_(size) {}
  std::unique_ptr<File> file_;
  uint64_t size_ = 0;
};

// Writes `path` atomically: bytes go to a new file beside it
// ("<path>.tmp.<pid>.<n>", created exclusively); Commit() syncs it, renames
// it over `path` and syncs the directory. Destroying an uncommitted writer
// (an error, an early return) removes the temporary file, so `path` is
// either as it was or complete.
class AtomicFileWriter {
 public:
  static absl::StatusOr<AtomicFileWriter> Create(Env* env,
                                                 const std::string& path);

  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&& other) noexcept;
  ~AtomicFileWriter();

  const std::string& path() const { return path_; }
  // Bytes appended so far.
  uint64_t written() const { return written_; }

  // FAILED_PRECONDITION after Commit().
  absl::Status Append(const void* data, size_t n);
  absl::Status Append(absl::string_view data) {
    return Append(data.data(), data.size());
  }
  // Makes the file visible under path(); the writer is spent afterwards
  // (also when this fails: the temporary file is then removed).
  absl::Status Commit();

 private:
  friend absl::Status WriteFileAtomic(Env* env, const std::string& path,
                                      absl::string_view contents);
  static absl::StatusOr<AtomicFileWriter> CreateAs(Env* env,
                                                   const std::string& path,
                                                   const std::string& temp,
                                                   bool exclusive);
  AtomicFileWriter(Env* env, std::string path, std::string temp,
                   std::unique_ptr<File> file)
      : env_(env),
        path_(std::move(path)),
        temp_(std::move(temp)),
        file_(std::move(file)) {}
  void Abandon();

  Env* env_ = nullptr;
  std::string path_;
  std::string temp_;
  std::unique_ptr<File> file_;  // null once committed or abandoned
  uint64_t written_ = 0;
};

// A file written front to back by one writer. Each Append goes straight to
// the OS (no buffer in this process), so what was appended survives this
// process's crash; Sync() makes it survive the machine's.
class AppendableFile {
 public:
  // Opens `path` (creating it) to append after its end, or with `truncate`
  // from empty.
  static absl::StatusOr<AppendableFile> Open(Env* env, const std::string& path,
                                             bool truncate = false);

  const std::string& path() const { return file_->path(); }
  uint64_t size() const { return size_; }

  absl::Status Append(absl::string_view data);
  absl::Status Sync() { return file_->Sync(); }

 private:
  AppendableFile(std::unique_ptr<File> file, uint64_t size)
      : file_(std::move(file)), size_(size) {}
  std::unique_ptr<File> file_;
  uint64_t size_ = 0;
};

// The existing paths matching `pattern`, sorted: glob(3) without flags
// (* ? [...] in any path component; a leading '.' of a name only matches
// explicitly; unreadable directories are skipped). Empty if none.
std::vector<std::string> Glob(Env* env, const std::string& pattern);

// Whether a file can be created in the directory `dir`: permission bits do
// not tell (root, a read-only file system), so one is created and removed
// (a name of this process's). The error is Env's, prefixed "cannot create
// a file in it: " (NOT_FOUND when `dir` does not exist).
absl::Status CheckCanCreateIn(Env* env, const std::string& dir);

// `dir` and its missing parents created (Env::CreateDir: 0700 each, as
// `mkdir -p`), then CheckCanCreateIn. An error names the level that could
// not be made ("cannot create /a/b: ...").
absl::Status MakeWritableDir(Env* env, const std::string& dir);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_ENV_FILES_H_
