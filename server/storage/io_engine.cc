#include "server/storage/io_engine.h"

#include <cstdio>
#include <string>

#include "common/status_macros.h"

namespace zeroshard {
namespace storage {

absl::Status IoBatch::Wait() {
  absl::MutexLock l(&mu_);
  mu_.Await(absl::Condition(
      +[](int* remaining) { return *remaining == 0; }, &remaining_));
  absl::Status s = std::move(status_);
  status_ = absl::OkStatus();
  return s;
}

bool IoBatch::done() const {
  absl::MutexLock l(&mu_);
  return remaining_ == 0;
}

void IoBatch::Add(int n) {
  absl::MutexLock l(&mu_);
  remaining_ += n;
}

void IoBatch::Done(const absl::Status& s) {
  absl::MutexLock l(&mu_);
  if (!s.ok() && status_.ok()) status_ = s;
  --remaining_;
}

absl::StatusOr<std::unique_ptr<IoEngine>> IoEngine::Create(Env* env,
                                                           int threads,
                                                           int queue_depth) {
  if (threads < 1 || queue_depth < 1) {
    return absl::InvalidArgumentError(
        "I/O threads (intra_op_parallelism) and queue_depth must be >= 1");
  }
  std::unique_ptr<IoEngine> e(new IoEngine);
  for (int i = 0; i < threads; ++i) {
    ZS_ASSIGN_OR_RETURN(std::unique_ptr<IoQueue> q,
                        env->NewIoQueue(queue_depth));
    e->queues_.push_back(std::move(q));
  }
  for (auto& q : e->queues_) {
    IoQueue* queue = q.get();
    IoEngine* self = e.get();
    e->threads_.emplace_back([self, queue] { self->Loop(queue); });
  }
  return e;
}

IoEngine::~IoEngine() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void IoEngine::Submit(const std::vector<IoRequest>& requests, IoBatch* batch) {
  if (requests.empty()) return;
  batch->Add(static_cast<int>(requests.size()));
  absl::MutexLock l(&mu_);
  for (const IoRequest& r : requests) pending_.push_back(Item{r, batch});
}

void IoEngine::Complete(const Item& item, const absl::Status& s) {
  if (s.ok()) {
    (item.request.op == IoOp::kRead ? bytes_read_ : bytes_written_)
        .fetch_add(item.request.len);
  }
  item.batch->Done(s);
}

void IoEngine::Loop(IoQueue* queue) {
  const int depth = queue->depth();
  std::vector<Item> slots(depth);
  std::vector<int> free_slots;
  for (int i = depth - 1; i >= 0; --i) free_slots.push_back(i);
  std::vector<IoCompletion> done(depth);
  std::vector<Item> take;
  while (true) {
    take.clear();
    {
      absl::MutexLock l(&mu_);
      if (queue->in_flight() == 0) {
        auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stop_ || !pending_.empty();
        };
        mu_.Await(absl::Condition(&ready));
        if (pending_.empty()) return;  // stopping, nothing left
      }
      while (!pending_.empty() &&
             queue->in_flight() + static_cast<int>(take.size()) < depth) {
        take.push_back(pending_.front());
        pending_.pop_front();
      }
    }
    for (Item& item : take) {
      const int slot = free_slots.back();
      free_slots.pop_back();
      item.request.tag = static_cast<uint64_t>(slot);
      slots[slot] = item;
      absl::Status s = queue->Submit(item.request);
      if (!s.ok()) {
        free_slots.push_back(slot);
        Complete(item, s);
      }
    }
    if (queue->in_flight() == 0) continue;
    absl::StatusOr<int> n = queue->Reap(true, done.data(), depth);
    if (!n.ok()) {
      std::fprintf(stderr, "storage: I/O thread: %s\n",
                   n.status().ToString().c_str());
      continue;
    }
    for (int i = 0; i < *n; ++i) {
      const int slot = static_cast<int>(done[i].tag);
      Complete(slots[slot], done[i].status);
      free_slots.push_back(slot);
    }
  }
}

}  // namespace storage
}  // namespace zeroshard
