#include "common/env/env.h"

#include <deque>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace zeroshard {
namespace storage {
namespace {

class SyncIoQueue : public IoQueue {
 public:
  explicit SyncIoQueue(int depth) : depth_(depth) {}
  int depth() const override { return depth_; }
  int in_flight() const override { return static_cast<int>(done_.size()); }

  absl::Status Submit(const IoRequest& r) override {
    if (in_flight() >= depth_) {
      return absl::FailedPreconditionError("I/O queue full");
    }
    IoCompletion c;
    c.tag = r.tag;
    c.status = r.op == IoOp::kRead ? r.file->Read(r.offset, r.buf, r.len)
                                   : r.file->Write(r.offset, r.buf, r.len);
    done_.push_back(std::move(c));
    return absl::OkStatus();
  }

  absl::StatusOr<int> Reap(bool wait, IoCompletion* out, int max) override {
    int n = 0;
    while (n < max && !done_.empty()) {
      out[n++] = std::move(done_.front());
      done_.pop_front();
    }
    return n;
  }

 private:
  const int depth_;
  std::deque<IoCompletion> done_;
};

}  // namespace

std::unique_ptr<IoQueue> NewSyncIoQueue(int depth) {
  return std::make_unique<SyncIoQueue>(depth);
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty() || dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

static std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

absl::Status WriteFileAtomic(Env* env, const std::string& path,
                             const std::string& contents) {
  const std::string tmp = path + ".tmp";
  if (env->FileExists(tmp)) ZS_RETURN_IF_ERROR(env->RemoveFile(tmp));
  {
    OpenOptions o;
    o.create = true;
    ZS_ASSIGN_OR_RETURN(std::unique_ptr<File> f, env->OpenFile(tmp, o));
    ZS_RETURN_IF_ERROR(f->Write(0, contents.data(), contents.size()));
    ZS_RETURN_IF_ERROR(f->Sync());
  }
  ZS_RETURN_IF_ERROR(env->RenameFile(tmp, path));
  return env->SyncDir(DirOf(path));
}

absl::StatusOr<std::string> ReadSmallFile(Env* env, const std::string& path) {
  OpenOptions o;
  o.read_only = true;
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<File> f, env->OpenFile(path, o));
  ZS_ASSIGN_OR_RETURN(uint64_t size, f->Size());
  if (size > (64u << 20)) {
    return absl::DataLossError(
        absl::StrCat(path, ": ", size, " bytes is too large for a manifest"));
  }
  std::string s(size, '\0');
  ZS_RETURN_IF_ERROR(f->Read(0, s.data(), size));
  return s;
}

}  // namespace storage
}  // namespace zeroshard
