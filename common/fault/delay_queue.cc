#include "common/fault/delay_queue.h"

#include <utility>
#include <vector>

#include "absl/time/clock.h"

namespace zeroshard::fault {

DelayQueue::DelayQueue() : thread_([this] { Loop(); }) {}

DelayQueue::~DelayQueue() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void DelayQueue::RunAfter(absl::Duration delay, std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  pending_.emplace(absl::Now() + delay, std::move(fn));
  ++added_;
}

void DelayQueue::Loop() {
  while (true) {
    std::vector<std::function<void()>> due;
    {
      absl::MutexLock lock(&mu_);
      // Sleep until the earliest due time, a new entry, or stop.
      const uint64_t seen = added_;
      const absl::Time wake =
          pending_.empty() ? absl::InfiniteFuture() : pending_.begin()->first;
      auto changed = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || added_ != seen;
      };
      mu_.AwaitWithDeadline(absl::Condition(&changed), wake);
      const absl::Time now = absl::Now();
      while (!pending_.empty() && (stop_ || pending_.begin()->first <= now)) {
        due.push_back(std::move(pending_.begin()->second));
        pending_.erase(pending_.begin());
      }
      if (stop_ && due.empty()) return;
    }
    for (auto& fn : due) fn();
  }
}

}  // namespace zeroshard::fault
