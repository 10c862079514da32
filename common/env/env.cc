#include "common/env/env.h"

#include <algorithm>
#include <deque>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace zeroshard {
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

bool IsPlainName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

absl::StatusOr<std::unique_ptr<File>> Env::OpenFileIn(
    const std::string& dir, const std::string& name,
    const OpenOptions& options) {
  if (!IsPlainName(name)) {
    return absl::FailedPreconditionError(
        absl::StrCat("open in ", dir, ": not a plain file name"));
  }
  return OpenFile(JoinPath(dir, name), options);
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty() || dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

absl::StatusOr<std::string> ReadFileFrom(Env* env, const std::string& path,
                                         uint64_t offset, size_t max_bytes) {
  OpenOptions o;
  o.read_only = true;
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<File> f, env->OpenFile(path, o));
  ZS_ASSIGN_OR_RETURN(const uint64_t size, f->Size());
  // The size is only a first guess (/proc files report 0, logs grow): read
  // until a read returns nothing or max_bytes are in (one byte more than the
  // guess sees the end without growing the buffer).
  std::string s(
      std::min<uint64_t>((size > offset ? size - offset : 0) + 1, max_bytes),
      '\0');
  size_t n = 0;
  for (;;) {
    if (n == s.size()) {
      if (n == max_bytes) break;
      s.resize(std::min(std::max<size_t>(2 * n, 4096), max_bytes));
    }
    ZS_ASSIGN_OR_RETURN(const size_t got,
                        f->ReadUpTo(offset + n, s.data() + n, s.size() - n));
    if (got == 0) break;
    n += got;
  }
  s.resize(n);
  return s;
}

absl::StatusOr<std::string> ReadSmallFile(Env* env, const std::string& path,
                                          size_t max_bytes) {
  // One byte more than allowed shows a file too large.
  ZS_ASSIGN_OR_RETURN(std::string s, ReadFileFrom(env, path, 0, max_bytes + 1));
  if (s.size() > max_bytes) {
    return absl::DataLossError(absl::StrCat(path, ": more than ", max_bytes,
                                            " bytes, too large to read whole"));
  }
  return s;
}

}  // namespace zeroshard
