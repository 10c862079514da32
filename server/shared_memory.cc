#include "server/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/unique_fd.h"

namespace zeroshard {

struct SharedSegments::Mapping {
  Mapping(char* b, uint64_t s) : base(b), size(s) {}
  ~Mapping() { munmap(base, size); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  char* const base;
  const uint64_t size;
};

namespace {

absl::Status Refused(const std::string& why) {
  return absl::FailedPreconditionError(absl::StrCat("shared memory: ", why));
}

std::string ErrnoText() { return std::strerror(errno); }

}  // namespace

absl::StatusOr<std::shared_ptr<SharedSegments::Mapping>> SharedSegments::Map(
    const v1::SharedRef& ref) {
  const std::string path = absl::StrCat("/proc/", ref.pid(), "/fd/", ref.fd());
  // Named as a segment before anything is opened (opening a device can do
  // things), and again once opened (the client may have replaced the
  // descriptor in between).
  const auto is_segment = [](const std::string& link_path) {
    char link[256] = {0};
    const ssize_t n = readlink(link_path.c_str(), link, sizeof(link) - 1);
    return n >= 0 &&
           absl::StartsWith(absl::string_view(link, n),
                            absl::StrCat("/memfd:", kSharedSegmentName));
  };
  if (access(path.c_str(), F_OK) != 0) {
    return Refused(absl::StrCat("cannot see ", path, " (", ErrnoText(),
                                "): the client is not on this host, or in "
                                "another pid namespace"));
  }
  if (!is_segment(path)) {
    return Refused(absl::StrCat(path, " is not a zeroshard segment"));
  }
  UniqueFd fd(open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (fd.get() < 0) {
    return Refused(absl::StrCat("cannot open ", path, ": ", ErrnoText()));
  }
  if (!is_segment(absl::StrCat("/proc/self/fd/", fd.get()))) {
    return Refused(absl::StrCat(path, " is not a zeroshard segment"));
  }
  struct stat st;
  if (fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<uint64_t>(st.st_size) < kSharedHeaderBytes) {
    return Refused(absl::StrCat(path, " is not a segment of at least ",
                                kSharedHeaderBytes, " bytes"));
  }
  const int seals = fcntl(fd.get(), F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    return Refused(absl::StrCat(path, " is not sealed against shrinking"));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  void* base =
      mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) {
    return Refused(absl::StrCat("cannot map ", path, ": ", ErrnoText()));
  }
  auto mapping = std::make_shared<Mapping>(static_cast<char*>(base), size);
  if (ref.token().size() != kSharedTokenBytes ||
      std::memcmp(mapping->base, ref.token().data(), kSharedTokenBytes) != 0) {
    return Refused(absl::StrCat(path, " does not hold the request's token"));
  }
  return mapping;
}

absl::StatusOr<SharedSegments::View> SharedSegments::Resolve(
    const v1::SharedRef& ref, uint64_t bytes) {
  if (ref.token().size() != kSharedTokenBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory: the token has ", ref.token().size(),
                     " bytes, not ", kSharedTokenBytes));
  }
  const absl::Time now = absl::Now();
  std::shared_ptr<Mapping> mapping;
  {
    absl::MutexLock l(&mu_);
    auto it = by_token_.find(ref.token());
    if (it != by_token_.end()) {
      mapping = it->second.mapping;
      it->second.last_use = now;
      lru_.splice(lru_.begin(), lru_, it->second.lru);
    }
  }
  if (mapping == nullptr) {
    absl::StatusOr<std::shared_ptr<Mapping>> mapped = Map(ref);
    if (!mapped.ok()) return mapped.status();
    mapping = *std::move(mapped);
    absl::MutexLock l(&mu_);
    auto [it, inserted] = by_token_.try_emplace(ref.token());
    if (inserted) {
      lru_.push_front(ref.token());
      it->second = Entry{mapping, now, lru_.begin()};
    } else {  // another request mapped it meanwhile
      mapping = it->second.mapping;
    }
    Evict(now);
  }
  if (ref.offset() < kSharedHeaderBytes || ref.offset() > mapping->size ||
      bytes > mapping->size - ref.offset()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared memory: ", bytes, " bytes at offset ", ref.offset(),
        " do not fit the ", mapping->size, "-byte segment after its ",
        kSharedHeaderBytes, "-byte header"));
  }
  return View{mapping, mapping->base + ref.offset()};
}

void SharedSegments::Evict(absl::Time now) {
  while (!lru_.empty()) {
    auto it = by_token_.find(lru_.back());
    if (by_token_.size() <= options_.max_segments &&
        now - it->second.last_use < options_.idle) {
      break;
    }
    by_token_.erase(it);
    lru_.pop_back();
  }
}

size_t SharedSegments::size() const {
  absl::MutexLock l(&mu_);
  return by_token_.size();
}

}  // namespace zeroshard
