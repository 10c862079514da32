// A fixed pool of threads for data-parallel loops (optimizer tiles, norms).
//
// ParallelFor(n, fn) runs fn(i) for every i in [0, n) on the pool's threads
// and the calling thread, and returns when all calls have finished. Calls
// from several threads are serialised (one loop at a time); fn must not call
// ParallelFor on the same pool. Workers sleep on a condition variable
// between loops; nothing spins.
#ifndef ZEROSHARD_COMMON_THREAD_POOL_H_
#define ZEROSHARD_COMMON_THREAD_POOL_H_

#include <atomic>
#include <cstddef>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace zeroshard {

class ThreadPool {
 public:
  // `threads` >= 1 counts the caller: threads - 1 workers are started.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  void ParallelFor(size_t n, const std::function<void(size_t)>& fn)
      ABSL_LOCKS_EXCLUDED(loop_mu_, mu_);

 private:
  void WorkerLoop();
  void RunItems(const std::function<void(size_t)>& fn, size_t n);

  absl::Mutex loop_mu_;  // serialises ParallelFor callers
  absl::Mutex mu_;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int active_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  const std::function<void(size_t)>* fn_ ABSL_GUARDED_BY(mu_) = nullptr;
  size_t n_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<size_t> next_{0};  // next item to claim in this generation
  std::vector<std::thread> workers_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_THREAD_POOL_H_
