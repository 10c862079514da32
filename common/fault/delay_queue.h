// DelayQueue: runs callbacks after a delay on one background thread, in
// due-time order. The fault interceptors use it to hold a call back
// (deferred Proceed) without blocking a gRPC thread.
//
// Callbacks must be short (they run one at a time). Thread-safe. The
// destructor runs every callback still pending at once (a held call must
// always continue), then joins the thread.
#ifndef ZEROSHARD_COMMON_FAULT_DELAY_QUEUE_H_
#define ZEROSHARD_COMMON_FAULT_DELAY_QUEUE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace zeroshard::fault {

class DelayQueue {
 public:
  DelayQueue();
  ~DelayQueue();
  DelayQueue(const DelayQueue&) = delete;
  DelayQueue& operator=(const DelayQueue&) = delete;

  // Runs `fn` on the queue's thread once `delay` has passed.
  void RunAfter(absl::Duration delay, std::function<void()> fn);

 private:
  void Loop();

  absl::Mutex mu_;
  std::multimap<absl::Time, std::function<void()>> pending_
      ABSL_GUARDED_BY(mu_);
  uint64_t added_ ABSL_GUARDED_BY(mu_) = 0;  // entries ever added
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace zeroshard::fault

#endif  // ZEROSHARD_COMMON_FAULT_DELAY_QUEUE_H_
