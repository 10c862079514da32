// FaultEnv: wraps another Env and injects the failures a storage tier must
// survive: a full device (ENOSPC after a byte budget), failed reads (EIO),
// failed fsyncs and renames. Files and queues it returns forward to the
// wrapped Env's; every injected error names the file like a real one.
//
// Example:
//   MemEnv mem;
//   FaultEnv env(&mem);
//   env.SetWriteBudget(1 << 20);  // the 1 MiB after this point succeed
//   ...                           // later writes: RESOURCE_EXHAUSTED
//   env.ClearFaults();
//
// Threading: thread-safe; fault settings may change while I/O runs.
#ifndef ZEROSHARD_COMMON_ENV_FAULT_ENV_H_
#define ZEROSHARD_COMMON_ENV_FAULT_ENV_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/env/env.h"

namespace zeroshard {

class FaultEnv : public Env {
 public:
  explicit FaultEnv(Env* base) : base_(base) {}

  // Writes (File::Write, queued writes, growth by Allocate) succeed for
  // `bytes` more bytes, then fail with RESOURCE_EXHAUSTED (ENOSPC). A write
  // that does not fit entirely fails entirely.
  void SetWriteBudget(int64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  // The next `count` reads of files whose path contains `substring` fail
  // with an I/O error (INTERNAL, "Input/output error").
  void FailReads(const std::string& substring, int count)
      ABSL_LOCKS_EXCLUDED(mu_);
  void FailSyncs(bool fail) ABSL_LOCKS_EXCLUDED(mu_);
  void FailRenames(bool fail) ABSL_LOCKS_EXCLUDED(mu_);
  void ClearFaults() ABSL_LOCKS_EXCLUDED(mu_);

  // Checks called by the wrapped files and queues.
  absl::Status CheckWrite(const std::string& path, uint64_t offset,
                          uint64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status CheckRead(const std::string& path, uint64_t offset)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status CheckSync(const std::string& path) ABSL_LOCKS_EXCLUDED(mu_);

  absl::StatusOr<std::unique_ptr<File>> OpenFile(
      const std::string& path, const OpenOptions& options) override;
  absl::StatusOr<std::unique_ptr<IoQueue>> NewIoQueue(int depth) override;
  absl::Status CreateDir(const std::string& path) override {
    return base_->CreateDir(path);
  }
  absl::Status RemoveDir(const std::string& path) override {
    return base_->RemoveDir(path);
  }
  absl::Status RemoveFile(const std::string& path) override {
    return base_->RemoveFile(path);
  }
  absl::Status RenameFile(const std::string& from,
                          const std::string& to) override;
  absl::Status LinkFile(const std::string& from,
                        const std::string& to) override {
    return base_->LinkFile(from, to);
  }
  absl::Status CopyFile(const std::string& from,
                        const std::string& to) override;
  absl::StatusOr<std::vector<std::string>> ListDir(
      const std::string& path) override {
    return base_->ListDir(path);
  }
  absl::Status SyncDir(const std::string& path) override;
  bool FileExists(const std::string& path) override {
    return base_->FileExists(path);
  }
  absl::StatusOr<uint64_t> FreeBytes(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<FileLock>> LockFile(
      const std::string& path) override {
    return base_->LockFile(path);
  }

 private:
  Env* const base_;
  absl::Mutex mu_;
  int64_t write_budget_ ABSL_GUARDED_BY(mu_) = -1;  // -1: unlimited
  std::string read_fault_ ABSL_GUARDED_BY(mu_);
  int read_faults_ ABSL_GUARDED_BY(mu_) = 0;
  bool fail_syncs_ ABSL_GUARDED_BY(mu_) = false;
  bool fail_renames_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_ENV_FAULT_ENV_H_
