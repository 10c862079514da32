// Page-aligned, zero-initialised buffers for O_DIRECT I/O, counted in a
// MemoryAccount so that a tier can report (and tests can bound) the bytes
// it holds in RAM.
//
// Errors: AlignedBuffer::Allocate answers RESOURCE_EXHAUSTED, naming the
// bytes and what they were for, when the allocation fails (an address-space
// limit, or overcommit refused): use it for every allocation whose size a
// request decides (the state arrays, gradient slots, pipeline buffers).
// The constructor aborts instead; it is for small fixed-size scratch
// buffers only.
//
// Threading: MemoryAccount is thread-safe; an AlignedBuffer is a plain
// owning value (move-only).
#ifndef ZEROSHARD_SERVER_STORAGE_BUFFER_H_
#define ZEROSHARD_SERVER_STORAGE_BUFFER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/env/env.h"

namespace zeroshard {
namespace storage {

class MemoryAccount {
 public:
  void Add(uint64_t bytes) {
    const uint64_t now = current_.fetch_add(bytes) + bytes;
    uint64_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
  }
  void Sub(uint64_t bytes) { current_.fetch_sub(bytes); }
  uint64_t current() const { return current_.load(); }
  uint64_t peak() const { return peak_.load(); }

 private:
  std::atomic<uint64_t> current_{0};
  std::atomic<uint64_t> peak_{0};
};

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // `bytes` rounded up to kIoAlign, zero-filled, counted in `account`
  // (may be null) until destruction. RESOURCE_EXHAUSTED "cannot allocate N
  // bytes for <what>" when memory is refused.
  static absl::StatusOr<AlignedBuffer> Allocate(uint64_t bytes,
                                                MemoryAccount* account,
                                                absl::string_view what) {
    AlignedBuffer b;
    const uint64_t size = AlignUp(bytes == 0 ? 1 : bytes, kIoAlign);
    if (size >= bytes) {  // no overflow
      b.data_ = static_cast<char*>(std::aligned_alloc(kIoAlign, size));
    }
    if (b.data_ == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "cannot allocate ", bytes, " bytes for ", what, " (out of memory)"));
    }
    b.size_ = size;
    b.account_ = account;
    std::memset(b.data_, 0, size);
    if (account != nullptr) account->Add(size);
    return b;
  }
  // The same for small scratch buffers: aborts if memory is exhausted.
  AlignedBuffer(uint64_t bytes, MemoryAccount* account)
      : size_(AlignUp(bytes == 0 ? 1 : bytes, kIoAlign)), account_(account) {
    data_ = static_cast<char*>(std::aligned_alloc(kIoAlign, size_));
    if (data_ == nullptr) std::abort();
    std::memset(data_, 0, size_);
    if (account_ != nullptr) account_->Add(size_);
  }
  ~AlignedBuffer() { Reset(); }
  AlignedBuffer(AlignedBuffer&& o) noexcept { *this = std::move(o); }
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    if (this != &o) {
      Reset();
      std::swap(data_, o.data_);
      std::swap(size_, o.size_);
      std::swap(account_, o.account_);
    }
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  char* data() const { return data_; }
  uint64_t size() const { return size_; }
  template <typename T>
  T* as() const {
    return reinterpret_cast<T*>(data_);
  }

 private:
  void Reset() {
    if (data_ == nullptr) return;
    std::free(data_);
    if (account_ != nullptr) account_->Sub(size_);
    data_ = nullptr;
    size_ = 0;
  }

  char* data_ = nullptr;
  uint64_t size_ = 0;
  MemoryAccount* account_ = nullptr;
};

}  // namespace storage
}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_STORAGE_BUFFER_H_
