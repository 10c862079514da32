#include "server/optim/parallel.h"

#include <algorithm>

namespace zeroshard {
namespace optim {

TilePool::TilePool(int threads) {
  const int workers = std::max(threads, 1) - 1;
  workers_.reserve(workers);
  for (int i = 0; i < workers; ++i) {
    workers_.emplace_back([this] { WorkerLoop(); });
  }
}

TilePool::~TilePool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void TilePool::WorkTiles() {
  for (;;) {
    const size_t k = next_tile_.fetch_add(1, std::memory_order_relaxed);
    if (k >= (n_ + tile_ - 1) / tile_) return;
    const size_t begin = k * tile_;
    (*fn_)(begin, std::min(n_, begin + tile_));
  }
}

void TilePool::WorkerLoop() {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    WorkTiles();
    bool last;
    {
      std::lock_guard<std::mutex> lock(mu_);
      last = --pending_ == 0;
    }
    if (last) done_cv_.notify_one();
  }
}

void TilePool::Run(size_t n, size_t tile, const TileFn& fn) {
  if (n == 0) return;
  const size_t parts = workers_.size() + 1;
  if (tile == 0) tile = (n + parts - 1) / parts;
  tile = (tile + kTileAlign - 1) / kTileAlign * kTileAlign;
  if (workers_.empty() || tile >= n) {
    for (size_t begin = 0; begin < n; begin += tile) {
      fn(begin, std::min(n, begin + tile));
    }
    return;
  }
  std::lock_guard<std::mutex> run_lock(run_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    tile_ = tile;
    next_tile_.store(0, std::memory_order_relaxed);
    pending_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  start_cv_.notify_all();
  WorkTiles();
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return pending_ == 0; });
  fn_ = nullptr;
}

void ParallelFor(size_t n, size_t grain, int threads,
                 const std::function<void(size_t begin, size_t end)>& fn) {
  TilePool pool(threads);
  pool.Run(n, grain, fn);
}

}  // namespace optim
}  // namespace zeroshard
