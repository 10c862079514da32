// A tiny persistent thread pool that splits a range into tiles.
//
// TilePool(threads) keeps threads - 1 worker threads asleep on a condition
// variable; Run() wakes them, works on tiles in the calling thread too, and
// returns when every tile is done. Tiles are handed out dynamically (an atomic
// counter), which keeps all threads busy on a noisy machine. Tile sizes are
// rounded up to a multiple of 64 elements, so with 64-byte aligned arrays of
// 4-byte (or larger) elements every tile starts on a cache line.

#ifndef ZEROSHARD_SERVER_OPTIM_PARALLEL_H_
#define ZEROSHARD_SERVER_OPTIM_PARALLEL_H_

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace zeroshard {
namespace optim {

// Tile sizes are multiples of this many elements.
inline constexpr size_t kTileAlign = 64;

class TilePool {
 public:
  using TileFn = std::function<void(size_t begin, size_t end)>;

  // `threads` is the total number of threads working in Run(), the caller
  // included; values < 1 mean 1.
  explicit TilePool(int threads);
  ~TilePool();

  TilePool(const TilePool&) = delete;
  TilePool& operator=(const TilePool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) for tiles [k*tile', min(n, (k+1)*tile')) covering
  // [0, n), where tile' is `tile` rounded up to a multiple of kTileAlign
  // (0 means one tile per thread, rounded likewise). Blocks until all calls
  // returned. Concurrent Run() calls on one pool are serialized.
  void Run(size_t n, size_t tile, const TileFn& fn);

 private:
  void WorkerLoop();
  void WorkTiles();

  std::mutex run_mu_;  // serializes Run()
  std::mutex mu_;      // guards the fields below
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  uint64_t generation_ = 0;
  bool stop_ = false;
  int pending_ = 0;  // workers that have not finished the current job

  // The current job; written under mu_ before generation_ is bumped.
  const TileFn* fn_ = nullptr;
  size_t n_ = 0;
  size_t tile_ = 0;
  std::atomic<size_t> next_tile_{0};

  std::vector<std::thread> workers_;
};

// Convenience: runs fn over tiles of `grain` elements on a temporary pool of
// `threads` threads (starting threads costs ~10-50 us; keep a TilePool for
// repeated calls).
void ParallelFor(size_t n, size_t grain, int threads,
                 const std::function<void(size_t begin, size_t end)>& fn);

}  // namespace optim
}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_OPTIM_PARALLEL_H_
