#include "worker/engine/squares_behind.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "common/optim/clip.h"
#include "gtest/gtest.h"

namespace zeroshard::engine {
namespace {

std::vector<float> Values(size_t n, uint32_t seed) {
  std::vector<float> x(n);
  for (float& v : x) {
    seed = seed * 1664525u + 1013904223u;
    v = std::ldexp(static_cast<float>(seed >> 8) / 16777216.0f - 0.5f,
                   static_cast<int>(seed % 41) - 20);
  }
  return x;
}

TEST(SquaresBehindTest, PiecesAreSummedInTheOrderQueued) {
  // Big pieces so that the thread is still summing when more are queued.
  const std::vector<float> x = Values(3'000'017, 5);
  const std::vector<size_t> cuts = {0,         1,         9,       1'000'000,
                                    1'000'003, 2'500'000, x.size()};
  // The pieces from the last one down, each appended last element first:
  // the whole of x reversed.
  SquareSum want;
  want.AddReversed(x.data(), x.size());
  for (int threads : {1, 3}) {
    SquaresBehind behind(threads);
    for (int round = 0; round < 3; ++round) {
      behind.Reset();
      for (size_t i = cuts.size() - 1; i > 0; --i) {
        behind.AddReversed(x.data() + cuts[i - 1], cuts[i] - cuts[i - 1]);
      }
      EXPECT_EQ(behind.Total(), want.Total())
          << threads << " threads, round " << round;
      // Total again: the same stream, nothing added.
      EXPECT_EQ(behind.Total(), want.Total());
    }
  }
  // Another order is another stream (so the check above could fail).
  SquaresBehind behind;
  behind.AddReversed(x.data(), cuts[3]);
  behind.AddReversed(x.data() + cuts[3], x.size() - cuts[3]);
  EXPECT_NE(behind.Total(), want.Total());
}

TEST(SquaresBehindTest, ResetStartsAfreshAndEmptyIsZero) {
  const std::vector<float> x = Values(1000, 9);
  SquaresBehind behind;
  EXPECT_EQ(behind.Total(), 0.0);
  behind.AddReversed(x.data(), x.size());
  behind.Reset();
  behind.AddReversed(x.data(), 0);
  EXPECT_EQ(behind.Total(), 0.0);
  behind.AddReversed(x.data(), 10);
  SquareSum want;
  want.AddReversed(x.data(), 10);
  EXPECT_EQ(behind.Total(), want.Total());
}

TEST(SquaresBehindTest, DestroyedWithPiecesQueued) {
  const std::vector<float> x = Values(2'000'000, 3);
  for (int i = 0; i < 10; ++i) {
    SquaresBehind behind;
    behind.AddReversed(x.data(), x.size());
    behind.AddReversed(x.data(), x.size());
  }  // each waits for its pieces: none reads x after the loop
}

}  // namespace
}  // namespace zeroshard::engine
