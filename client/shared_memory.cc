#include "client/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/model_spec.h"
#include "common/unique_fd.h"

namespace zeroshard {

struct SegmentPool::Segment {
  ~Segment() {
    if (base != nullptr) munmap(base, size);
  }
  UniqueFd fd;
  char* base = nullptr;
  uint64_t size = 0;  // the whole segment, header included
  v1::SharedRef ref;
};

namespace {

absl::Status OsError(const std::string& what) {
  return absl::UnavailableError(
      absl::StrCat("shared memory: ", what, ": ", std::strerror(errno)));
}

// Free segments kept for reuse, at most (more are unmapped on return).
// 1 GiB: a 124M-parameter push (500 MB) in flight at once, with room.
constexpr uint64_t kMaxFreeBytes = uint64_t{1} << 30;

// The smallest power of two >= max(bytes + header, 1 MiB).
uint64_t SegmentSize(uint64_t bytes) {
  uint64_t size = uint64_t{1} << 20;
  while (size < bytes + kSharedHeaderBytes) size *= 2;
  return size;
}

absl::StatusOr<std::unique_ptr<SegmentPool::Segment>> NewSegment(
    uint64_t bytes) {
  auto s = std::make_unique<SegmentPool::Segment>();
  s->fd = UniqueFd(
      memfd_create(kSharedSegmentName, MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (s->fd.get() < 0) return OsError("memfd_create");
  s->size = SegmentSize(bytes);
  if (ftruncate(s->fd.get(), static_cast<off_t>(s->size)) != 0) {
    return OsError("ftruncate");
  }
  // The server maps it: no one may shrink it under the mapping.
  if (fcntl(s->fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL) != 0) {
    return OsError("sealing");
  }
  void* base = mmap(nullptr, s->size, PROT_READ | PROT_WRITE, MAP_SHARED,
                    s->fd.get(), 0);
  if (base == MAP_FAILED) return OsError("mmap");
  s->base = static_cast<char*>(base);
  char token[kSharedTokenBytes];
  if (getrandom(token, sizeof(token), 0) != sizeof(token)) {
    return OsError("getrandom");
  }
  std::memcpy(s->base, token, sizeof(token));
  s->ref.set_pid(static_cast<uint32_t>(getpid()));
  s->ref.set_fd(static_cast<uint32_t>(s->fd.get()));
  s->ref.set_token(token, sizeof(token));
  s->ref.set_offset(kSharedHeaderBytes);
  return s;
}

}  // namespace

SegmentPool::Lease::Lease(SegmentPool* pool, std::unique_ptr<Segment> segment)
    : pool_(pool), segment_(std::move(segment)) {}

SegmentPool::Lease::Lease(Lease&& other) noexcept
    : pool_(other.pool_),
      segment_(std::move(other.segment_)),
      discard_(other.discard_) {}

SegmentPool::Lease& SegmentPool::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    Release();
    pool_ = other.pool_;
    segment_ = std::move(other.segment_);
    discard_ = other.discard_;
  }
  return *this;
}

SegmentPool::Lease::~Lease() { Release(); }

void SegmentPool::Lease::Release() {
  if (segment_ != nullptr && !discard_) pool_->Return(std::move(segment_));
  segment_.reset();
}

char* SegmentPool::Lease::data() const {
  return segment_->base + kSharedHeaderBytes;
}

const v1::SharedRef& SegmentPool::Lease::ref() const { return segment_->ref; }

SegmentPool::SegmentPool() = default;
SegmentPool::~SegmentPool() = default;

absl::StatusOr<SegmentPool::Lease> SegmentPool::Acquire(uint64_t bytes) {
  {
    absl::MutexLock l(&mu_);
    // The smallest free segment that fits.
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if ((*it)->size - kSharedHeaderBytes >= bytes &&
          (best == free_.end() || (*it)->size < (*best)->size)) {
        best = it;
      }
    }
    if (best != free_.end()) {
      std::unique_ptr<Segment> s = std::move(*best);
      free_.erase(best);
      return Lease(this, std::move(s));
    }
  }
  absl::StatusOr<std::unique_ptr<Segment>> s = NewSegment(bytes);
  if (!s.ok()) return s.status();
  absl::MutexLock l(&mu_);
  ++created_;
  return Lease(this, *std::move(s));
}

void SegmentPool::Return(std::unique_ptr<Segment> segment) {
  absl::MutexLock l(&mu_);
  uint64_t kept = segment->size;
  for (const std::unique_ptr<Segment>& s : free_) kept += s->size;
  if (kept > kMaxFreeBytes) return;  // unmapped as it goes
  free_.push_back(std::move(segment));
}

uint64_t SegmentPool::created() const {
  absl::MutexLock l(&mu_);
  return created_;
}

}  // namespace zeroshard
