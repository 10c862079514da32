// HostCopyStream: the host-emulated device's copy stream (host_device.h).
// Copies are queued in issue order and run by one thread, each no earlier
// than `lag` after it was issued, so a caller that reads a copy's
// destination before waiting for it, or frees what a copy reads, sees the
// old bytes (or fails) in CI instead of only on a GPU. Each copy checks
// that its source still holds the bytes it held when the copy was issued:
// a source written in between (on a GPU, a later kernel racing the copy
// stream) is an error naming the copy.
//
// Threading: Issue, Done, Wait and WaitAll may be called from any thread;
// the copies run on the stream's own thread. Errors: the first failed
// copy's, returned by every later Wait.
#ifndef ZEROSHARD_WORKER_GPT2_HOST_COPY_STREAM_H_
#define ZEROSHARD_WORKER_GPT2_HOST_COPY_STREAM_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace zeroshard::gpt2 {

class HostCopyStream {
 public:
  explicit HostCopyStream(absl::Duration lag);
  ~HostCopyStream();  // runs every copy still queued

  // Queues dst <- src (`bytes`); the ticket (1, 2, ...) for Done and Wait.
  // `dst` and `src` must stay valid until the copy has run.
  uint64_t Issue(void* dst, const void* src, size_t bytes);
  // Whether copy `ticket` has run (does not wait).
  bool Done(uint64_t ticket);
  // Waits until copy `ticket` and every copy before it have run; OK or the
  // first error.
  absl::Status Wait(uint64_t ticket);
  // Wait for every copy issued so far.
  absl::Status WaitAll();

  // A 64-bit checksum of `bytes` at `p` (the source check).
  static uint64_t Checksum(const void* p, size_t bytes);

 private:
  struct Copy {
    uint64_t ticket;
    void* dst;
    const void* src;
    size_t bytes;
    uint64_t checksum;  // of src at Issue
    absl::Time due;
  };
  void Run();

  const absl::Duration lag_;
  absl::Mutex mu_;
  absl::CondVar changed_;  // a copy queued or run, or stopping
  std::deque<Copy> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t issued_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t done_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the rest is built
};

}  // namespace zeroshard::gpt2

#endif  // ZEROSHARD_WORKER_GPT2_HOST_COPY_STREAM_H_
