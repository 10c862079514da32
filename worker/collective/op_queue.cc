#include "worker/collective/op_queue.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace zeroshard {
namespace collective {

OpQueue::OpQueue(std::function<void()> wake)
    : wake_(std::move(wake)), thread_([this] { Loop(); }) {}

OpQueue::~OpQueue() { Shutdown(); }

void OpQueue::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (wake_) wake_();
  if (thread_.joinable()) thread_.join();
}

CollectiveOp OpQueue::Submit(std::string description, RunFn run) {
  auto state = std::make_shared<OpState>();
  absl::MutexLock lock(&mu_);
  if (stop_) {
    state->Complete(
        absl::CancelledError(description + ": communicator shutting down"), {});
  } else {
    queue_.push_back(
        Item{std::move(description), std::move(run), next_seq_++, state});
  }
  return CollectiveOp(std::move(state));
}

bool OpQueue::stopping() {
  absl::MutexLock lock(&mu_);
  return stop_;
}

void OpQueue::Loop() {
  while (true) {
    Item item;
    bool stop;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](OpQueue* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu_) {
            return q->stop_ || !q->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // stopping, nothing left
      item = std::move(queue_.front());
      queue_.pop_front();
      stop = stop_;
    }
    const std::string what = absl::StrCat(item.description, " #", item.seq);
    if (stop) {
      item.state->Complete(
          absl::CancelledError(what + ": communicator destroyed"), {});
    } else if (!broken_.ok()) {
      item.state->Complete(
          absl::FailedPreconditionError(
              absl::StrCat(what, ": communicator broken by an earlier error: ",
                           broken_.message())),
          {});
    } else {
      OpStats stats;
      absl::Status status = item.run(item.seq, &stats);
      if (!status.ok()) broken_ = status;
      item.state->Complete(std::move(status), stats);
    }
  }
}

}  // namespace collective
}  // namespace zeroshard
