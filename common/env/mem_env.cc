#include "common/env/mem_env.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace zeroshard {
namespace {

std::string Parent(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos || slash == 0) return "/";
  return path.substr(0, slash);
}

class MemFile : public File {
 public:
  MemFile(std::string path, std::shared_ptr<MemEnv::Data> data, bool direct,
          bool read_only)
      : path_(std::move(path)),
        data_(std::move(data)),
        direct_(direct),
        read_only_(read_only) {}

  const std::string& path() const override { return path_; }
  bool direct() const override { return direct_; }

  absl::Status Read(uint64_t offset, void* buf, size_t n) override {
    if (absl::Status s = CheckAligned("read", offset, buf, n); !s.ok()) {
      return s;
    }
    absl::MutexLock l(&data_->mu);
    const std::string& b = data_->bytes;
    if (offset + n > b.size()) {
      return absl::DataLossError(
          absl::StrCat("read ", path_, " at ", offset, ": file ends ",
                       offset + n - b.size(), " bytes early"));
    }
    std::memcpy(buf, b.data() + offset, n);
    return absl::OkStatus();
  }

  absl::StatusOr<size_t> ReadUpTo(uint64_t offset, void* buf,
                                  size_t n) override {
    if (absl::Status s = CheckAligned("read", offset, buf, n); !s.ok()) {
      return s;
    }
    absl::MutexLock l(&data_->mu);
    const std::string& b = data_->bytes;
    if (offset >= b.size()) return size_t{0};
    n = std::min<uint64_t>(n, b.size() - offset);
    std::memcpy(buf, b.data() + offset, n);
    return n;
  }

  absl::Status Write(uint64_t offset, const void* buf, size_t n) override {
    if (read_only_) {
      return absl::PermissionDeniedError(
          absl::StrCat("write ", path_, ": opened read-only"));
    }
    if (absl::Status s = CheckAligned("write", offset, buf, n); !s.ok()) {
      return s;
    }
    absl::MutexLock l(&data_->mu);
    std::string& b = data_->bytes;
    if (offset + n > b.size()) b.resize(offset + n, '\0');
    std::memcpy(b.data() + offset, buf, n);
    return absl::OkStatus();
  }

  absl::Status Allocate(uint64_t size) override {
    absl::MutexLock l(&data_->mu);
    if (data_->bytes.size() < size) data_->bytes.resize(size, '\0');
    return absl::OkStatus();
  }
  absl::Status Sync() override { return absl::OkStatus(); }
  absl::StatusOr<uint64_t> Size() override {
    absl::MutexLock l(&data_->mu);
    return static_cast<uint64_t>(data_->bytes.size());
  }

 private:
  absl::Status CheckAligned(const char* verb, uint64_t offset, const void* buf,
                            size_t n) const {
    if (!direct_) return absl::OkStatus();
    if (offset % kIoAlign != 0 || n % kIoAlign != 0 ||
        reinterpret_cast<uintptr_t>(buf) % kIoAlign != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(verb, " ", path_, " at ", offset, " (", n,
                       " bytes): not aligned for O_DIRECT"));
    }
    return absl::OkStatus();
  }

  const std::string path_;
  std::shared_ptr<MemEnv::Data> data_;
  const bool direct_;
  const bool read_only_;
};

}  // namespace

// Removes its path from the MemEnv's lock set when destroyed.
class MemFileLock : public FileLock {
 public:
  MemFileLock(std::string path, MemEnv* env)
      : path_(std::move(path)), env_(env) {}
  ~MemFileLock() override { env_->Unlock(path_); }
  const std::string& path() const override { return path_; }

 private:
  const std::string path_;
  MemEnv* const env_;
};

void MemEnv::Unlock(const std::string& path) {
  absl::MutexLock l(&mu_);
  locked_.erase(path);
}

absl::StatusOr<std::unique_ptr<FileLock>> MemEnv::LockFile(
    const std::string& path) {
  OpenOptions o;
  o.create = true;
  absl::StatusOr<std::unique_ptr<File>> f = OpenFile(path, o);
  if (!f.ok()) return f.status();
  {
    absl::MutexLock l(&mu_);
    if (!locked_.insert(path).second) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, " is locked (held by pid ", getpid(), ")"));
    }
  }
  auto lock = std::make_unique<MemFileLock>(path, this);
  const std::string pid = absl::StrCat(getpid(), "\n");
  if (absl::Status s = Truncate(path, 0); !s.ok()) return s;
  if (absl::Status s = (*f)->Write(0, pid.data(), pid.size()); !s.ok()) {
    return s;
  }
  return std::unique_ptr<FileLock>(std::move(lock));
}

bool MemEnv::ParentExistsLocked(const std::string& path) {
  return dirs_.count(Parent(path)) > 0;
}

std::shared_ptr<MemEnv::Data> MemEnv::Find(const std::string& path) {
  absl::MutexLock l(&mu_);
  auto it = files_.find(path);
  return it == files_.end() ? nullptr : it->second;
}

absl::StatusOr<std::unique_ptr<File>> MemEnv::OpenFile(const std::string& path,
                                                       const OpenOptions& o) {
  std::shared_ptr<Data> data;
  {
    absl::MutexLock l(&mu_);
    auto it = files_.find(path);
    if (it != files_.end()) {
      if (o.create && o.exclusive) {
        return absl::AlreadyExistsError(
            absl::StrCat("open ", path, ": File exists"));
      }
      data = it->second;
    } else if (dirs_.count(path) > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("open ", path, ": is a directory, not a file"));
    } else if (!o.create || !ParentExistsLocked(path)) {
      return absl::NotFoundError(
          absl::StrCat("open ", path, ": No such file or directory"));
    } else {
      data = std::make_shared<Data>();
      files_[path] = data;
    }
  }
  if (o.truncate && !o.read_only) {
    absl::MutexLock l(&data->mu);
    data->bytes.clear();
  }
  return std::unique_ptr<File>(new MemFile(
      path, std::move(data), o.direct && check_alignment_, o.read_only));
}

absl::Status MemEnv::CreateDir(const std::string& path) {
  absl::MutexLock l(&mu_);
  if (dirs_.count(path) > 0) return absl::OkStatus();
  if (files_.count(path) > 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("create directory ", path, ": File exists"));
  }
  if (!ParentExistsLocked(path)) {
    return absl::NotFoundError(
        absl::StrCat("create directory ", path, ": No such file or directory"));
  }
  dirs_.insert(path);
  return absl::OkStatus();
}

absl::Status MemEnv::RemoveFile(const std::string& path) {
  absl::MutexLock l(&mu_);
  if (files_.erase(path) == 0) {
    return absl::NotFoundError(
        absl::StrCat("remove ", path, ": No such file or directory"));
  }
  return absl::OkStatus();
}

absl::Status MemEnv::RemoveDir(const std::string& path) {
  absl::MutexLock l(&mu_);
  if (dirs_.count(path) == 0) {
    return absl::NotFoundError(
        absl::StrCat("remove directory ", path, ": No such file or directory"));
  }
  const std::string prefix = path + "/";
  bool holds = false;
  for (const auto& [name, data] : files_)
    holds |= absl::StartsWith(name, prefix);
  for (const std::string& d : dirs_) holds |= absl::StartsWith(d, prefix);
  if (holds) {
    return absl::FailedPreconditionError(
        absl::StrCat("remove directory ", path, ": not empty"));
  }
  dirs_.erase(path);
  return absl::OkStatus();
}

absl::Status MemEnv::RenameFile(const std::string& from,
                                const std::string& to) {
  absl::MutexLock l(&mu_);
  auto it = files_.find(from);
  if (it == files_.end() || !ParentExistsLocked(to)) {
    return absl::NotFoundError(absl::StrCat("rename ", from, " to ", to,
                                            ": No such file or directory"));
  }
  files_[to] = it->second;
  files_.erase(from);
  return absl::OkStatus();
}

absl::Status MemEnv::LinkFile(const std::string& from, const std::string& to) {
  absl::MutexLock l(&mu_);
  auto it = files_.find(from);
  if (it == files_.end() || !ParentExistsLocked(to)) {
    return absl::NotFoundError(
        absl::StrCat("link ", from, " to ", to, ": No such file or directory"));
  }
  if (files_.count(to) > 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("link ", from, " to ", to, ": File exists"));
  }
  files_[to] = it->second;
  return absl::OkStatus();
}

absl::Status MemEnv::CopyFile(const std::string& from, const std::string& to) {
  std::shared_ptr<Data> src = Find(from);
  if (src == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("copy ", from, ": No such file or directory"));
  }
  auto copy = std::make_shared<Data>();
  {
    absl::MutexLock s(&src->mu);
    absl::MutexLock d(&copy->mu);
    copy->bytes = src->bytes;
  }
  absl::MutexLock l(&mu_);
  if (!ParentExistsLocked(to)) {
    return absl::NotFoundError(
        absl::StrCat("copy to ", to, ": No such file or directory"));
  }
  files_[to] = std::move(copy);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> MemEnv::ListDir(
    const std::string& path) {
  absl::MutexLock l(&mu_);
  if (dirs_.count(path) == 0) {
    return absl::NotFoundError(
        absl::StrCat("list ", path, ": No such file or directory"));
  }
  std::vector<std::string> names;
  const std::string prefix = path == "/" ? "/" : path + "/";
  for (const auto& [name, data] : files_) {
    if (absl::StartsWith(name, prefix) &&
        name.find('/', prefix.size()) == std::string::npos) {
      names.push_back(name.substr(prefix.size()));
    }
  }
  for (const std::string& d : dirs_) {
    if (d != path && absl::StartsWith(d, prefix) &&
        d.find('/', prefix.size()) == std::string::npos) {
      names.push_back(d.substr(prefix.size()));
    }
  }
  return names;
}

bool MemEnv::FileExists(const std::string& path) {
  absl::MutexLock l(&mu_);
  return files_.count(path) > 0 || dirs_.count(path) > 0;
}

absl::Status MemEnv::Truncate(const std::string& path, uint64_t size) {
  std::shared_ptr<Data> d = Find(path);
  if (d == nullptr) return absl::NotFoundError(path);
  absl::MutexLock l(&d->mu);
  d->bytes.resize(size, '\0');
  return absl::OkStatus();
}

absl::Status MemEnv::FlipByte(const std::string& path, uint64_t offset) {
  std::shared_ptr<Data> d = Find(path);
  if (d == nullptr) return absl::NotFoundError(path);
  absl::MutexLock l(&d->mu);
  if (offset >= d->bytes.size()) return absl::OutOfRangeError(path);
  d->bytes[offset] = static_cast<char>(~d->bytes[offset]);
  return absl::OkStatus();
}

}  // namespace zeroshard
