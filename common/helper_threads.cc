#include "common/helper_threads.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace zeroshard {

struct HelperThreads::State {
  absl::Mutex mu;
  std::deque<std::function<void()>> queue ABSL_GUARDED_BY(mu);
  size_t idle ABSL_GUARDED_BY(mu) = 0;      // helpers waiting for a task
  size_t starting ABSL_GUARDED_BY(mu) = 0;  // started, not yet waiting
  int live ABSL_GUARDED_BY(mu) = 0;
  int64_t started ABSL_GUARDED_BY(mu) = 0;
  bool stop ABSL_GUARDED_BY(mu) = false;
  absl::Duration keep_alive;
  std::function<bool(std::function<void()>)> start_thread;
};

namespace {

// pthread_create, detached: no exception where the thread cannot start.
bool StartDetached(std::function<void()> body) {
  auto* heap = new std::function<void()>(std::move(body));
  pthread_attr_t attr;
  if (pthread_attr_init(&attr) != 0) {
    delete heap;
    return false;
  }
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t thread;
  const int rc = pthread_create(
      &thread, &attr,
      [](void* arg) -> void* {
        pthread_setname_np(pthread_self(), "zs-helper");
        std::unique_ptr<std::function<void()>> f(
            static_cast<std::function<void()>*>(arg));
        (*f)();
        return nullptr;
      },
      heap);
  pthread_attr_destroy(&attr);
  if (rc != 0) delete heap;
  return rc == 0;
}

}  // namespace

HelperThreads::HelperThreads(Options options)
    : state_(std::make_shared<State>()) {
  state_->keep_alive = options.keep_alive;
  state_->start_thread =
      options.start_thread ? std::move(options.start_thread) : StartDetached;
}

HelperThreads::~HelperThreads() {
  State& s = *state_;
  absl::MutexLock l(&s.mu);
  s.stop = true;
  auto gone = [&s]()
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) { return s.live == 0; };
  s.mu.Await(absl::Condition(&gone));
}

HelperThreads& HelperThreads::Default() {
  struct Holder {
    pid_t pid;
    HelperThreads* pool;
  };
  static std::atomic<Holder*> current{nullptr};
  const pid_t me = getpid();
  while (true) {
    Holder* h = current.load(std::memory_order_acquire);
    if (h != nullptr && h->pid == me) return *h->pool;
    // First use, or first use in a child after fork(): the parent's pool
    // stays as it is (its threads did not follow the fork).
    auto* fresh = new Holder{me, new HelperThreads(Options{})};
    if (current.compare_exchange_strong(h, fresh, std::memory_order_acq_rel)) {
      return *fresh->pool;
    }
    delete fresh->pool;
    delete fresh;
  }
}

bool HelperThreads::Submit(std::function<void()> task) {
  State& s = *state_;
  absl::MutexLock l(&s.mu);
  if (s.stop) return false;
  s.queue.push_back(std::move(task));
  if (s.queue.size() <= s.idle + s.starting) return true;  // one will take it
  ++s.starting;
  ++s.live;
  ++s.started;
  std::shared_ptr<State> keep = state_;
  const bool ok = s.start_thread([keep] {
    State& st = *keep;
    st.mu.Lock();
    --st.starting;
    auto has_work = [&st]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(st.mu) {
      return st.stop || !st.queue.empty();
    };
    while (true) {
      ++st.idle;
      st.mu.AwaitWithTimeout(absl::Condition(&has_work), st.keep_alive);
      --st.idle;
      if (st.queue.empty()) break;  // idle too long, or stopped
      std::function<void()> next = std::move(st.queue.front());
      st.queue.pop_front();
      st.mu.Unlock();
      next();
      st.mu.Lock();
    }
    --st.live;
    st.mu.Unlock();
  });
  if (ok) return true;
  --s.starting;
  --s.live;
  --s.started;
  s.queue.pop_back();  // ours: nobody could take it while we hold mu
  return false;
}

void HelperThreads::Run(size_t n, const std::function<void(size_t)>& fn,
                        size_t parallel) {
  if (n == 0) return;
  // What the helpers of this call share with it. Held by each helper's
  // task, so a helper may still be unlocking it after the caller returned.
  struct Join {
    absl::Mutex mu;
    size_t running ABSL_GUARDED_BY(mu) = 0;
  };
  auto join = std::make_shared<Join>();
  std::atomic<size_t> next{0};
  const auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) fn(i);
  };
  const size_t helpers = std::min(n, std::max<size_t>(1, parallel)) - 1;
  for (size_t t = 0; t < helpers; ++t) {
    {
      absl::MutexLock l(&join->mu);
      ++join->running;
    }
    const bool ok = Submit([join, &work] {
      work();
      absl::MutexLock l(&join->mu);
      --join->running;
    });
    if (!ok) {
      absl::MutexLock l(&join->mu);
      --join->running;
      break;  // the caller does the rest
    }
  }
  work();
  Join& j = *join;
  absl::MutexLock l(&j.mu);
  auto done = [&j]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(j.mu) {
    return j.running == 0;
  };
  j.mu.Await(absl::Condition(&done));
}

int64_t HelperThreads::threads_started() const {
  absl::MutexLock l(&state_->mu);
  return state_->started;
}

int HelperThreads::live() const {
  absl::MutexLock l(&state_->mu);
  return state_->live;
}

int HelperThreads::idle() const {
  absl::MutexLock l(&state_->mu);
  return static_cast<int>(state_->idle);
}

}  // namespace zeroshard
