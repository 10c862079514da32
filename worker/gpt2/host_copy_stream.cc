#include "worker/gpt2/host_copy_stream.h"

#include <cstring>

#include "absl/strings/str_format.h"

namespace zeroshard::gpt2 {

HostCopyStream::HostCopyStream(absl::Duration lag)
    : lag_(lag), thread_([this] { Run(); }) {}

HostCopyStream::~HostCopyStream() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
    changed_.SignalAll();
  }
  thread_.join();
}

uint64_t HostCopyStream::Checksum(const void* p, size_t bytes) {
  // FNV-1a over 8-byte words, then the tail bytes.
  constexpr uint64_t kPrime = 0x100000001b3ull;
  uint64_t h = 0xcbf29ce484222325ull;
  const auto* b = static_cast<const unsigned char*>(p);
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t w;
    std::memcpy(&w, b + i, 8);
    h = (h ^ w) * kPrime;
  }
  for (; i < bytes; ++i) h = (h ^ b[i]) * kPrime;
  return h;
}

uint64_t HostCopyStream::Issue(void* dst, const void* src, size_t bytes) {
  const uint64_t sum = Checksum(src, bytes);
  absl::MutexLock l(&mu_);
  const uint64_t ticket = ++issued_;
  queue_.push_back(Copy{ticket, dst, src, bytes, sum, absl::Now() + lag_});
  changed_.SignalAll();
  return ticket;
}

bool HostCopyStream::Done(uint64_t ticket) {
  absl::MutexLock l(&mu_);
  return done_ >= ticket;
}

absl::Status HostCopyStream::Wait(uint64_t ticket) {
  absl::MutexLock l(&mu_);
  if (ticket > issued_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "host-emulated device: wait for copy %d, but only %d were issued",
        ticket, issued_));
  }
  while (done_ < ticket) changed_.Wait(&mu_);
  return status_;
}

absl::Status HostCopyStream::WaitAll() {
  uint64_t last;
  {
    absl::MutexLock l(&mu_);
    last = issued_;
  }
  return Wait(last);
}

void HostCopyStream::Run() {
  while (true) {
    Copy c;
    {
      absl::MutexLock l(&mu_);
      while (!stop_ && queue_.empty()) changed_.Wait(&mu_);
      if (queue_.empty()) return;  // stopping, nothing left
      c = queue_.front();
    }
    const absl::Duration early = c.due - absl::Now();
    if (early > absl::ZeroDuration()) absl::SleepFor(early);
    absl::Status s;
    if (Checksum(c.src, c.bytes) != c.checksum) {
      s = absl::InternalError(absl::StrFormat(
          "host-emulated device: the source of copy %d (%d bytes from %p to "
          "the host) changed between ToHostAsync and the copy: a kernel "
          "enqueued after the copy wrote it",
          c.ticket, c.bytes, c.src));
    } else {
      std::memcpy(c.dst, c.src, c.bytes);
    }
    absl::MutexLock l(&mu_);
    queue_.pop_front();
    if (status_.ok()) status_ = s;
    done_ = c.ticket;
    changed_.SignalAll();
  }
}

}  // namespace zeroshard::gpt2
