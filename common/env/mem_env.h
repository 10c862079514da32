// MemEnv: an in-memory Env for hermetic tests. Files are byte strings;
// directories are a set of names (a file can only be created inside an
// existing directory; "/" always exists). Hard links share contents.
// Queues are synchronous (NewSyncIoQueue). LockFile locks are per MemEnv:
// a second lock of the same path fails until the first is destroyed (locks
// must not outlive the MemEnv).
//
// With `check_alignment` (default) a file opened with options.direct reports
// direct() == true and rejects, as O_DIRECT does, any Read/Write whose
// buffer, offset or length is not kIoAlign-aligned (INVALID_ARGUMENT), so
// alignment bugs show up without a disk.
//
// Threading: thread-safe.
#ifndef ZEROSHARD_COMMON_ENV_MEM_ENV_H_
#define ZEROSHARD_COMMON_ENV_MEM_ENV_H_

#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/env/env.h"

namespace zeroshard {

class MemFileLock;

class MemEnv : public Env {
 public:
  explicit MemEnv(bool check_alignment = true)
      : check_alignment_(check_alignment) {}

  absl::StatusOr<std::unique_ptr<File>> OpenFile(
      const std::string& path, const OpenOptions& options) override;
  absl::StatusOr<std::unique_ptr<IoQueue>> NewIoQueue(int depth) override {
    return NewSyncIoQueue(depth);
  }
  absl::Status CreateDir(const std::string& path) override;
  absl::Status RemoveFile(const std::string& path) override;
  absl::Status RemoveDir(const std::string& path) override;
  absl::Status RenameFile(const std::string& from,
                          const std::string& to) override;
  absl::Status LinkFile(const std::string& from,
                        const std::string& to) override;
  absl::Status CopyFile(const std::string& from,
                        const std::string& to) override;
  absl::StatusOr<std::vector<std::string>> ListDir(
      const std::string& path) override;
  absl::Status SyncDir(const std::string& path) override {
    return absl::OkStatus();
  }
  bool FileExists(const std::string& path) override;
  absl::StatusOr<uint64_t> FreeBytes(const std::string& path) override {
    return uint64_t{1} << 50;
  }
  absl::StatusOr<std::unique_ptr<FileLock>> LockFile(
      const std::string& path) override;

  // Test helpers: cut a file to `size` bytes; flip the bits of one byte.
  absl::Status Truncate(const std::string& path, uint64_t size);
  absl::Status FlipByte(const std::string& path, uint64_t offset);

  struct Data {
    absl::Mutex mu;
    std::string bytes ABSL_GUARDED_BY(mu);
  };

 private:
  friend class MemFileLock;
  void Unlock(const std::string& path) ABSL_LOCKS_EXCLUDED(mu_);
  std::shared_ptr<Data> Find(const std::string& path);
  bool ParentExistsLocked(const std::string& path)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const bool check_alignment_;
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Data>> files_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> dirs_ ABSL_GUARDED_BY(mu_) = {"/"};
  std::set<std::string> locked_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_ENV_MEM_ENV_H_
