#include "common/thread_pool.h"

namespace zeroshard {

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; ++i) {
    workers_.emplace_back([this] { WorkerLoop(); });
  }
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::RunItems(const std::function<void(size_t)>& fn, size_t n) {
  for (size_t i = next_.fetch_add(1); i < n; i = next_.fetch_add(1)) fn(i);
}

void ThreadPool::WorkerLoop() {
  uint64_t seen = 0;
  const std::function<void(size_t)>* fn = nullptr;
  size_t n = 0;
  while (true) {
    {
      absl::MutexLock l(&mu_);
      auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || generation_ != seen;
      };
      mu_.Await(absl::Condition(&ready));
      if (stop_) return;
      seen = generation_;
      // A worker that wakes after its loop has finished sees fn_ == nullptr
      // and goes back to sleep. One that captures fn_ is counted in active_
      // in the same critical section, so the caller waits for it.
      fn = fn_;
      n = n_;
      if (fn == nullptr) continue;
      ++active_;
    }
    RunItems(*fn, n);
    absl::MutexLock l(&mu_);
    --active_;
  }
}

void ThreadPool::ParallelFor(size_t n, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  absl::MutexLock loop(&loop_mu_);
  if (workers_.empty() || n == 1) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  {
    absl::MutexLock l(&mu_);
    n_ = n;
    next_.store(0);
    fn_ = &fn;
    ++generation_;
  }
  RunItems(fn, n);
  // All items are claimed once next_ passes n; wait for the workers that
  // joined this generation to finish theirs.
  absl::MutexLock l(&mu_);
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return active_ == 0; };
  mu_.Await(absl::Condition(&done));
  fn_ = nullptr;
}

}  // namespace zeroshard
