// Helper threads for blocking fan-out: one RPC per server, per piece.
//
// Run(n, fn) calls fn(i) for every i in [0, n), at most `parallel` at once:
// on the calling thread and on up to parallel - 1 helpers. A helper is an
// idle thread kept from an earlier call, else a new one; a helper idle for
// `keep_alive` exits. So a client that fans out every step reuses the same
// few threads instead of starting (and tearing down) one per call.
//
// Never fails and never throws: where no thread can be started (thread
// limits), the caller's thread does the items nobody else took, so the
// work completes, only less in parallel.
//
// Thread safety: Run may be called from any thread at once, and from
// inside fn (a nested fan-out gets helpers of its own; nothing waits for a
// busy helper). fn must not throw.
//
// Default() is the process's pool, made at first use and never destroyed
// (its threads are detached); a child made by fork() gets a fresh one,
// since the parent's threads do not follow a fork.
#ifndef ZEROSHARD_COMMON_HELPER_THREADS_H_
#define ZEROSHARD_COMMON_HELPER_THREADS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <utility>

#include "absl/time/time.h"

namespace zeroshard {

class HelperThreads {
 public:
  struct Options {
    absl::Duration keep_alive = absl::Seconds(30);
    // Starts a detached thread running `body`; false when none can be
    // started (then `body` is dropped unrun). Empty: pthread_create.
    std::function<bool(std::function<void()> body)> start_thread;
  };

  explicit HelperThreads(Options options);
  // Stops the idle helpers; a helper still running a Run's items finishes
  // them first (no Run may be in progress on this pool).
  ~HelperThreads();
  HelperThreads(const HelperThreads&) = delete;
  HelperThreads& operator=(const HelperThreads&) = delete;

  static HelperThreads& Default();

  void Run(size_t n, const std::function<void(size_t)>& fn,
           size_t parallel = SIZE_MAX);

  // Runs fn() on a helper and returns its future; where no helper can be
  // started, runs it on the caller's thread before returning. Unlike
  // std::async's, the future does not wait in its destructor: wait for it
  // before anything fn uses goes away.
  template <typename F>
  auto Async(F fn) -> std::future<decltype(fn())> {
    using R = decltype(fn());
    auto task = std::make_shared<std::packaged_task<R()>>(std::move(fn));
    std::future<R> result = task->get_future();
    if (!Submit([task] { (*task)(); })) (*task)();
    return result;
  }

  // For tests: threads started so far, helpers alive now, and those of
  // them waiting for work.
  int64_t threads_started() const;
  int live() const;
  int idle() const;

 private:
  struct State;
  // Hands `task` to an idle helper or a new one; false when neither.
  bool Submit(std::function<void()> task);

  std::shared_ptr<State> state_;  // shared with every helper
};

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_HELPER_THREADS_H_
