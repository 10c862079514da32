#include "worker/io/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace zeroshard::io {
namespace {

absl::Status ErrnoError(int err, const std::string& path, const char* what) {
  return absl::ErrnoToStatus(err, absl::StrCat(path, ": ", what));
}

}  // namespace

absl::StatusOr<ReadOnlyFile> ReadOnlyFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) {
      return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    }
    return ErrnoError(err, path, "cannot open");
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoError(err, path, "cannot stat");
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": is a directory, not a file"));
  }
  return ReadOnlyFile(path, fd, static_cast<uint64_t>(st.st_size));
}

ReadOnlyFile::ReadOnlyFile(ReadOnlyFile&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      size_(other.size_) {}

ReadOnlyFile& ReadOnlyFile::operator=(ReadOnlyFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
  }
  return *this;
}

ReadOnlyFile::~ReadOnlyFile() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status ReadOnlyFile::PRead(uint64_t offset, size_t n, void* dst) const {
  char* out = static_cast<char*>(dst);
  size_t done = 0;
  while (done < n) {
    const ssize_t k =
        ::pread(fd_, out + done, n - done, static_cast<off_t>(offset + done));
    if (k < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, path_, "read failed");
    }
    if (k == 0) {
      return absl::DataLossError(absl::StrCat(
          path_, ": file ended at byte ", offset + done, " while reading ", n,
          " bytes at offset ", offset, " (truncated?)"));
    }
    done += static_cast<size_t>(k);
  }
  return absl::OkStatus();
}

absl::StatusOr<AtomicFileWriter> AtomicFileWriter::Create(
    const std::string& path) {
  std::string templ = path + ".tmp.XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  const int fd = ::mkostemp(buf.data(), O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, path, "cannot create temporary file");
  return AtomicFileWriter(path, buf.data(), fd);
}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept
    : path_(std::move(other.path_)),
      temp_(std::move(other.temp_)),
      fd_(std::exchange(other.fd_, -1)),
      written_(other.written_) {}

AtomicFileWriter& AtomicFileWriter::operator=(
    AtomicFileWriter&& other) noexcept {
  if (this != &other) {
    Abandon();
    path_ = std::move(other.path_);
    temp_ = std::move(other.temp_);
    fd_ = std::exchange(other.fd_, -1);
    written_ = other.written_;
  }
  return *this;
}

AtomicFileWriter::~AtomicFileWriter() { Abandon(); }

void AtomicFileWriter::Abandon() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(temp_.c_str());
  fd_ = -1;
}

absl::Status AtomicFileWriter::Append(const void* data, size_t n) {
  if (fd_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(path_, ": writer already committed or abandoned"));
  }
  const char* in = static_cast<const char*>(data);
  size_t done = 0;
  while (done < n) {
    const ssize_t k = ::write(fd_, in + done, n - done);
    if (k < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, path_, "write failed");
    }
    done += static_cast<size_t>(k);
  }
  written_ += n;
  return absl::OkStatus();
}

absl::Status AtomicFileWriter::Commit() {
  if (fd_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(path_, ": writer already committed or abandoned"));
  }
  if (::fsync(fd_) != 0) return ErrnoError(errno, path_, "fsync failed");
  // mkostemp creates 0600; give the file the usual 0644.
  if (::fchmod(fd_, 0644) != 0) {
    return ErrnoError(errno, path_, "chmod failed");
  }
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(temp_.c_str());
    return ErrnoError(err, path_, "close failed");
  }
  if (::rename(temp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp_.c_str());
    return ErrnoError(err, path_, "rename failed");
  }
  return absl::OkStatus();
}

absl::StatusOr<FileHeader> ReadHeader(const ReadOnlyFile& file, int32_t magic,
                                      const char* kind) {
  if (file.size() < kHeaderBytes) {
    return absl::DataLossError(absl::StrCat(
        file.path(), ": truncated: ", file.size(), " bytes, shorter than the ",
        kHeaderBytes, "-byte header of an ", kind));
  }
  FileHeader header;
  if (absl::Status s = file.PRead(0, kHeaderBytes, header.data()); !s.ok()) {
    return s;
  }
  if (header[0] != magic) {
    return absl::InvalidArgumentError(absl::StrCat(file.path(), ": bad magic ",
                                                   header[0], " (expected ",
                                                   magic, "): not an ", kind));
  }
  return header;
}

absl::Status CheckFileSize(const ReadOnlyFile& file, uint64_t expected,
                           const std::string& why) {
  if (file.size() < expected) {
    return absl::DataLossError(
        absl::StrCat(file.path(), ": truncated: ", file.size(),
                     " bytes, but the ", why, " needs ", expected));
  }
  if (file.size() > expected) {
    return absl::DataLossError(
        absl::StrCat(file.path(), ": ", file.size() - expected,
                     " unexpected trailing bytes: ", file.size(),
                     " bytes, but the ", why, " needs ", expected));
  }
  return absl::OkStatus();
}

}  // namespace zeroshard::io
