// SquaresBehind: one fp64 sum of squares (SquareSum, common/optim/clip.h)
// fed piece by piece and computed on a thread of its own (each piece's
// whole blocks on a pool of `threads` threads), so that the gradient norm's
// pass over a bucket runs while backward and the pushes go on. The pieces
// are summed in the order they are queued: the bits are those of SquareSum
// over the same stream.
//
// Threading: Reset, AddReversed and Total from one thread at a time (the
// engine's, or the thread it runs the norm on); the summing thread reads
// the pieces. A queued piece must stay valid and unchanged until Total or
// Reset returns.
#ifndef ZEROSHARD_WORKER_ENGINE_SQUARES_BEHIND_H_
#define ZEROSHARD_WORKER_ENGINE_SQUARES_BEHIND_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>

#include "common/optim/clip.h"
#include "common/thread_pool.h"

namespace zeroshard::engine {

class SquaresBehind {
 public:
  // `threads`: the pool for each piece's whole blocks
  // (SquareSum::AddReversed), the summing thread among them; 0: the
  // machine's cores, at most 8.
  explicit SquaresBehind(int threads = 0);
  ~SquaresBehind();  // waits for the queued pieces
  SquaresBehind(const SquaresBehind&) = delete;
  SquaresBehind& operator=(const SquaresBehind&) = delete;

  // Starts a new stream (after the queued pieces are summed).
  void Reset();
  // Appends x[n-1], ..., x[0] to the stream (SquareSum::AddReversed).
  void AddReversed(const float* x, uint64_t n);
  // Waits for every queued piece; the stream's SquareSum::Total.
  double Total();

 private:
  struct Piece {
    const float* x;
    uint64_t n;
  };
  void Run();
  void Drain(std::unique_lock<std::mutex>& lock);

  ThreadPool pool_;  // used by the summing thread only
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Piece> queue_;  // guarded by mu_
  bool busy_ = false;        // the thread is summing a piece; mu_
  bool stop_ = false;        // mu_
  SquareSum sum_;            // written by the thread while busy_; mu_
  std::thread thread_;
};

}  // namespace zeroshard::engine

#endif  // ZEROSHARD_WORKER_ENGINE_SQUARES_BEHIND_H_
