#include "common/env/fault_env.h"

#include <deque>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace zeroshard {
namespace {

class FaultFile : public File {
 public:
  FaultFile(FaultEnv* env, std::unique_ptr<File> inner)
      : env_(env), inner_(std::move(inner)) {}
  File* inner() const { return inner_.get(); }

  const std::string& path() const override { return inner_->path(); }
  bool direct() const override { return inner_->direct(); }
  absl::Status Read(uint64_t offset, void* buf, size_t n) override {
    ZS_RETURN_IF_ERROR(env_->CheckRead(path(), offset));
    return inner_->Read(offset, buf, n);
  }
  absl::StatusOr<size_t> ReadUpTo(uint64_t offset, void* buf,
                                  size_t n) override {
    ZS_RETURN_IF_ERROR(env_->CheckRead(path(), offset));
    return inner_->ReadUpTo(offset, buf, n);
  }
  absl::Status Write(uint64_t offset, const void* buf, size_t n) override {
    ZS_RETURN_IF_ERROR(env_->CheckWrite(path(), offset, n));
    return inner_->Write(offset, buf, n);
  }
  absl::Status Allocate(uint64_t size) override {
    ZS_ASSIGN_OR_RETURN(uint64_t now, inner_->Size());
    if (size > now)
      ZS_RETURN_IF_ERROR(env_->CheckWrite(path(), now, size - now));
    return inner_->Allocate(size);
  }
  absl::Status Sync() override {
    ZS_RETURN_IF_ERROR(env_->CheckSync(path()));
    return inner_->Sync();
  }
  absl::StatusOr<uint64_t> Size() override { return inner_->Size(); }

 private:
  FaultEnv* const env_;
  std::unique_ptr<File> inner_;
};

class FaultQueue : public IoQueue {
 public:
  FaultQueue(FaultEnv* env, std::unique_ptr<IoQueue> inner)
      : env_(env), inner_(std::move(inner)) {}
  int depth() const override { return inner_->depth(); }
  int in_flight() const override {
    return inner_->in_flight() + static_cast<int>(failed_.size());
  }

  absl::Status Submit(const IoRequest& r) override {
    auto* f = static_cast<FaultFile*>(r.file);
    absl::Status fault = r.op == IoOp::kRead
                             ? env_->CheckRead(f->path(), r.offset)
                             : env_->CheckWrite(f->path(), r.offset, r.len);
    if (!fault.ok()) {
      failed_.push_back(IoCompletion{r.tag, std::move(fault)});
      return absl::OkStatus();
    }
    IoRequest inner = r;
    inner.file = f->inner();
    return inner_->Submit(inner);
  }

  absl::StatusOr<int> Reap(bool wait, IoCompletion* out, int max) override {
    int n = 0;
    while (n < max && !failed_.empty()) {
      out[n++] = std::move(failed_.front());
      failed_.pop_front();
    }
    if (n == max) return n;
    ZS_ASSIGN_OR_RETURN(int more,
                        inner_->Reap(wait && n == 0, out + n, max - n));
    return n + more;
  }

 private:
  FaultEnv* const env_;
  std::unique_ptr<IoQueue> inner_;
  std::deque<IoCompletion> failed_;
};

}  // namespace

void FaultEnv::SetWriteBudget(int64_t bytes) {
  absl::MutexLock l(&mu_);
  write_budget_ = bytes;
}

void FaultEnv::FailReads(const std::string& substring, int count) {
  absl::MutexLock l(&mu_);
  read_fault_ = substring;
  read_faults_ = count;
}

void FaultEnv::FailSyncs(bool fail) {
  absl::MutexLock l(&mu_);
  fail_syncs_ = fail;
}

void FaultEnv::FailRenames(bool fail) {
  absl::MutexLock l(&mu_);
  fail_renames_ = fail;
}

void FaultEnv::ClearFaults() {
  absl::MutexLock l(&mu_);
  write_budget_ = -1;
  read_faults_ = 0;
  fail_syncs_ = false;
  fail_renames_ = false;
}

absl::Status FaultEnv::CheckWrite(const std::string& path, uint64_t offset,
                                  uint64_t bytes) {
  absl::MutexLock l(&mu_);
  if (write_budget_ < 0) return absl::OkStatus();
  if (static_cast<uint64_t>(write_budget_) < bytes) {
    write_budget_ = 0;
    return absl::ResourceExhaustedError(
        absl::StrCat("write ", path, " at ", offset,
                     ": No space left on device (injected)"));
  }
  write_budget_ -= static_cast<int64_t>(bytes);
  return absl::OkStatus();
}

absl::Status FaultEnv::CheckRead(const std::string& path, uint64_t offset) {
  absl::MutexLock l(&mu_);
  if (read_faults_ > 0 && path.find(read_fault_) != std::string::npos) {
    --read_faults_;
    return absl::InternalError(absl::StrCat("read ", path, " at ", offset,
                                            ": Input/output error (injected)"));
  }
  return absl::OkStatus();
}

absl::Status FaultEnv::CheckSync(const std::string& path) {
  absl::MutexLock l(&mu_);
  if (fail_syncs_) {
    return absl::InternalError(
        absl::StrCat("fdatasync ", path, ": Input/output error (injected)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<File>> FaultEnv::OpenFile(
    const std::string& path, const OpenOptions& options) {
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<File> f, base_->OpenFile(path, options));
  return std::unique_ptr<File>(new FaultFile(this, std::move(f)));
}

absl::StatusOr<std::unique_ptr<IoQueue>> FaultEnv::NewIoQueue(int depth) {
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<IoQueue> q, base_->NewIoQueue(depth));
  return std::unique_ptr<IoQueue>(new FaultQueue(this, std::move(q)));
}

absl::Status FaultEnv::RenameFile(const std::string& from,
                                  const std::string& to) {
  {
    absl::MutexLock l(&mu_);
    if (fail_renames_) {
      return absl::InternalError(absl::StrCat(
          "rename ", from, " to ", to, ": Input/output error (injected)"));
    }
  }
  return base_->RenameFile(from, to);
}

absl::Status FaultEnv::CopyFile(const std::string& from,
                                const std::string& to) {
  ZS_RETURN_IF_ERROR(CheckWrite(to, 0, 0));
  return base_->CopyFile(from, to);
}

absl::Status FaultEnv::SyncDir(const std::string& path) {
  ZS_RETURN_IF_ERROR(CheckSync(path));
  return base_->SyncDir(path);
}

absl::StatusOr<uint64_t> FaultEnv::FreeBytes(const std::string& path) {
  {
    absl::MutexLock l(&mu_);
    if (write_budget_ >= 0) return static_cast<uint64_t>(write_budget_);
  }
  return base_->FreeBytes(path);
}

}  // namespace zeroshard
