#include "worker/engine/squares_behind.h"

#include <algorithm>

namespace zeroshard::engine {

namespace {

int Threads(int asked) {
  if (asked > 0) return asked;
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(cores, 1, 8);
}

}  // namespace

SquaresBehind::SquaresBehind(int threads)
    : pool_(Threads(threads)), thread_([this] { Run(); }) {}

SquaresBehind::~SquaresBehind() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    Drain(lock);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void SquaresBehind::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_
    const Piece p = queue_.front();
    queue_.pop_front();
    busy_ = true;
    SquareSum sum = sum_;
    lock.unlock();
    sum.AddReversed(p.x, p.n, &pool_);
    lock.lock();
    sum_ = sum;
    busy_ = false;
    cv_.notify_all();
  }
}

void SquaresBehind::Drain(std::unique_lock<std::mutex>& lock) {
  cv_.wait(lock, [this] { return queue_.empty() && !busy_; });
}

void SquaresBehind::Reset() {
  std::unique_lock<std::mutex> lock(mu_);
  Drain(lock);
  sum_ = SquareSum();
}

void SquaresBehind::AddReversed(const float* x, uint64_t n) {
  if (n == 0) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(Piece{x, n});
  }
  cv_.notify_all();
}

double SquaresBehind::Total() {
  std::unique_lock<std::mutex> lock(mu_);
  Drain(lock);
  return sum_.Total();
}

}  // namespace zeroshard::engine
