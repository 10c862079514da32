#include "common/env/files.h"

#include <fnmatch.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"

namespace zeroshard {
namespace {

// A temporary name beside `path` that no other writer of this process or
// another one uses at the same time.
std::string UniqueTempName(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return absl::StrCat(path, ".tmp.", getpid(), ".", counter.fetch_add(1));
}

bool HasWildcard(absl::string_view s) {
  return s.find_first_of("*?[") != absl::string_view::npos;
}

}  // namespace

absl::StatusOr<ReadOnlyFile> ReadOnlyFile::Open(Env* env,
                                                const std::string& path) {
  OpenOptions o;
  o.read_only = true;
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<File> f, env->OpenFile(path, o));
  ZS_ASSIGN_OR_RETURN(const uint64_t size, f->Size());
  return ReadOnlyFile(std::move(f), size);
}

absl::StatusOr<AtomicFileWriter> AtomicFileWriter::Create(
    Env* env, const std::string& path) {
  // A name left by a crashed process with a reused pid is skipped.
  absl::Status last;
  for (int attempt = 0; attempt < 8; ++attempt) {
    absl::StatusOr<AtomicFileWriter> w =
        CreateAs(env, path, UniqueTempName(path), /*exclusive=*/true);
    if (w.ok() || !absl::IsAlreadyExists(w.status())) return w;
    last = w.status();
  }
  return last;
}

absl::StatusOr<AtomicFileWriter> AtomicFileWriter::CreateAs(
    Env* env, const std::string& path, const std::string& temp,
    bool exclusive) {
  OpenOptions o;
  o.create = true;
  o.exclusive = exclusive;
  o.truncate = !exclusive;
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<File> f, env->OpenFile(temp, o));
  return AtomicFileWriter(env, path, temp, std::move(f));
}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept
    : env_(other.env_),
      path_(std::move(other.path_)),
      temp_(std::move(other.temp_)),
      file_(std::move(other.file_)),
      written_(other.written_) {}

AtomicFileWriter& AtomicFileWriter::operator=(
    AtomicFileWriter&& other) noexcept {
  if (this != &other) {
    Abandon();
    env_ = other.env_;
    path_ = std::move(other.path_);
    temp_ = std::move(other.temp_);
    file_ = std::move(other.file_);
    written_ = other.written_;
  }
  return *this;
}

AtomicFileWriter::~AtomicFileWriter() { Abandon(); }

void AtomicFileWriter::Abandon() {
  if (file_ == nullptr) return;
  file_.reset();
  (void)env_->RemoveFile(temp_);  // best effort: the error is already out
}

absl::Status AtomicFileWriter::Append(const void* data, size_t n) {
  if (file_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(path_, ": writer already committed or abandoned"));
  }
  ZS_RETURN_IF_ERROR(file_->Write(written_, data, n));
  written_ += n;
  return absl::OkStatus();
}

absl::Status AtomicFileWriter::Commit() {
  if (file_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(path_, ": writer already committed or abandoned"));
  }
  absl::Status s = file_->Sync();
  if (s.ok()) {
    file_.reset();
    s = env_->RenameFile(temp_, path_);
    if (!s.ok()) (void)env_->RemoveFile(temp_);
  }
  Abandon();  // after an error before the rename
  if (!s.ok()) return s;
  return env_->SyncDir(DirOf(path_));
}

absl::Status WriteFileAtomic(Env* env, const std::string& path,
                             absl::string_view contents) {
  ZS_ASSIGN_OR_RETURN(AtomicFileWriter w,
                      AtomicFileWriter::CreateAs(env, path, path + ".tmp",
                                                 /*exclusive=*/false));
  ZS_RETURN_IF_ERROR(w.Append(contents));
  return w.Commit();
}

absl::StatusOr<AppendableFile> AppendableFile::Open(Env* env,
                                                    const std::string& path,
                                                    bool truncate) {
  OpenOptions o;
  o.create = true;
  o.truncate = truncate;
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<File> f, env->OpenFile(path, o));
  ZS_ASSIGN_OR_RETURN(const uint64_t size, f->Size());
  return AppendableFile(std::move(f), size);
}

absl::Status AppendableFile::Append(absl::string_view data) {
  ZS_RETURN_IF_ERROR(file_->Write(size_, data.data(), data.size()));
  size_ += data.size();
  return absl::OkStatus();
}

std::vector<std::string> Glob(Env* env, const std::string& pattern) {
  if (pattern.empty()) return {};
  std::vector<std::string> paths = {pattern[0] == '/' ? "/" : ""};
  for (absl::string_view part : absl::StrSplit(pattern, '/')) {
    if (part.empty()) continue;
    std::vector<std::string> next;
    for (const std::string& dir : paths) {
      auto join = [&](absl::string_view name) {
        return dir.empty() ? std::string(name)
                           : JoinPath(dir, std::string(name));
      };
      if (!HasWildcard(part)) {
        next.push_back(join(part));
        continue;
      }
      absl::StatusOr<std::vector<std::string>> names =
          env->ListDir(dir.empty() ? "." : dir);
      if (!names.ok()) continue;  // glob(3) skips what it cannot read
      const std::string p(part);
      for (const std::string& name : *names) {
        if (fnmatch(p.c_str(), name.c_str(), FNM_PERIOD) == 0) {
          next.push_back(join(name));
        }
      }
    }
    paths = std::move(next);
  }
  // Literal components were not looked up: keep what exists.
  paths.erase(std::remove_if(paths.begin(), paths.end(),
                             [&](const std::string& p) {
                               return p.empty() || !env->FileExists(p);
                             }),
              paths.end());
  std::sort(paths.begin(), paths.end());
  return paths;
}

absl::Status CheckCanCreateIn(Env* env, const std::string& dir) {
  const std::string probe =
      absl::StrCat(".zeroshard-probe.", static_cast<long>(getpid()));
  OpenOptions create;
  create.create = true;
  // OpenFile, not OpenFileIn: `dir` may be a symbolic link to one.
  absl::StatusOr<std::unique_ptr<File>> f =
      env->OpenFile(JoinPath(dir, probe), create);
  if (!f.ok()) {
    return absl::Status(
        f.status().code(),
        absl::StrCat("cannot create a file in it: ", f.status().message()));
  }
  f->reset();
  return env->RemoveFile(JoinPath(dir, probe));
}

absl::Status MakeWritableDir(Env* env, const std::string& dir) {
  for (size_t i = 1; i <= dir.size(); ++i) {
    if (i < dir.size() && dir[i] != '/') continue;
    const std::string level = dir.substr(0, i);
    if (absl::Status s = env->CreateDir(level); !s.ok()) {
      return absl::Status(
          s.code(), absl::StrCat("cannot create ", level, ": ", s.message()));
    }
  }
  return CheckCanCreateIn(env, dir);
}

}  // namespace zeroshard
