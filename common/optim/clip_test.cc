#include "common/optim/clip.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace zeroshard {
namespace {

// Values from torch 1.13: for a float32 total_norm t and a Python float m,
// torch.clamp(m / (t + 1e-6), max=1.0).item(), as clip_grad_norm_ computes
// it. The first two pairs tell torch's reciprocal-then-multiply apart from
// a plain float division (which is one ulp off there).
TEST(ClipTest, MatchesTorchBitForBit) {
  struct Case {
    double total_norm, max_norm;
    float expected;
  };
  const Case cases[] = {
      {38.3068436393424, 1.3498382261231665, 0x1.20aa70p-5f},
      {1.9375189849559633, 1.186289164737872, 0x1.397bb6p-1f},
      {3.0, 1.0, 0x1.55554ep-2f},
      {1.0, 1.0, 0x1.ffffe0p-1f},  // 1e-6 makes it just below 1
      {0.5, 1.0, 1.0f},            // clamped: no clipping
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ClipCoefficient(c.total_norm, c.max_norm), c.expected)
        << c.total_norm << " " << c.max_norm;
  }
}

TEST(ClipTest, ZeroMaxNormDisablesClipping) {
  EXPECT_EQ(ClipCoefficient(1e9, 0.0), 1.0f);
  EXPECT_EQ(ClipCoefficient(1e9, -1.0), 1.0f);
}

TEST(ClipTest, GlobalNormSumsPartialsInOrder) {
  const std::vector<double> partials = {9.0, 16.0, 0.0};
  EXPECT_EQ(GlobalGradNorm(partials), 5.0);
  EXPECT_EQ(GlobalGradNorm({}), 0.0);
  EXPECT_TRUE(std::isinf(
      GlobalGradNorm({1.0, std::numeric_limits<double>::infinity()})));
}

TEST(ClipTest, DecideStepUnscalesBeforeClipping) {
  // Scaled grads of norm 3 * 1024 under loss scale 1024: unscaled norm 3.
  const std::vector<double> partials = {9.0 * 1024 * 1024};
  const StepDecision d = DecideStep(partials, false, 1024.0, 1.0);
  EXPECT_FALSE(d.skip);
  EXPECT_EQ(d.grad_norm, 3.0);
  EXPECT_EQ(d.grad_scale, 0x1.55554ep-2f / 1024.0f);  // exact: power of 2
}

TEST(ClipTest, DecideStepWithoutClippingOnlyUnscales) {
  const std::vector<double> partials = {4.0};
  EXPECT_EQ(DecideStep(partials, false, 1.0, 0.0).grad_scale, 1.0f);
  EXPECT_EQ(DecideStep(partials, false, 256.0, 0.0).grad_scale, 1.0f / 256);
}

TEST(ClipTest, DecideStepSkipsNonFinite) {
  const std::vector<double> finite = {4.0};
  EXPECT_TRUE(DecideStep(finite, /*any_nonfinite=*/true, 1.0, 1.0).skip);
  const std::vector<double> nan = {std::nan("")};
  EXPECT_TRUE(DecideStep(nan, false, 1.0, 1.0).skip);
}

// The sum by its definition: element e into block e / block, lane e % 8
// there; each block's lanes in the fixed tree; the blocks' totals in order.
double LaneReference(const std::vector<float>& x,
                     size_t block = SquareSum::kBlockSize) {
  double total = 0;
  for (size_t b0 = 0; b0 < x.size(); b0 += block) {
    double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (size_t e = b0; e < std::min(x.size(), b0 + block); ++e) {
      lane[e % 8] += static_cast<double>(x[e]) * x[e];
    }
    total += ((lane[0] + lane[4]) + (lane[1] + lane[5])) +
             ((lane[2] + lane[6]) + (lane[3] + lane[7]));
  }
  return total;
}

// n floats of magnitudes 2^-7 .. 2^6 from `seed`: their squares need more
// than fp64's 53 bits together, so the order of the adds shows.
std::vector<float> WideFloats(size_t n, uint32_t seed) {
  std::vector<float> x(n);
  for (float& v : x) {
    seed = seed * 1664525u + 1013904223u;
    v = std::ldexp(static_cast<float>(seed >> 8) / 16777216.0f - 0.5f,
                   static_cast<int>(seed % 13) - 6);
  }
  return x;
}

// Splits of a 1003-element stream at every offset pattern: aligned,
// unaligned, empty pieces.
std::vector<std::vector<size_t>> Cuts() {
  return {{},
          {1},
          {7, 8},
          {3, 3, 500},
          {8, 16, 1000},
          {5, 6, 13, 21, 34, 55, 89, 144, 233, 377, 610, 987}};
}

TEST(SquareSumTest, AnySplitOfTheStreamGivesTheSameBits) {
  std::vector<float> x(1003);
  uint32_t s = 99;
  for (float& v : x) {
    s = s * 1664525u + 1013904223u;
    v = static_cast<float>(s >> 8) / 16777216.0f - 0.5f;
  }
  const double want = LaneReference(x);
  double sequential = 0;
  for (float v : x) sequential += static_cast<double>(v) * v;
  EXPECT_NEAR(want, sequential, 1e-12 * sequential);
  for (const std::vector<size_t>& cuts : Cuts()) {
    SquareSum sum;
    size_t at = 0;
    for (size_t c : cuts) {
      sum.Add(x.data() + at, c - at);
      at = c;
    }
    sum.Add(x.data() + at, x.size() - at);
    EXPECT_EQ(sum.Total(), want) << "cuts " << cuts.size();
  }
}

TEST(SquareSumTest, AddReversedAppendsTheElementsLastFirst) {
  // (Seed 5: one of the streams whose reversal does change the total.)
  const std::vector<float> x = WideFloats(1003, 5);
  const std::vector<float> reversed(x.rbegin(), x.rend());
  const double want = LaneReference(reversed);
  // Reversing changes the bits of the sum (or the check below is empty).
  EXPECT_NE(want, LaneReference(x));
  // Pieces of the reversed stream, each appended from its own last element:
  // piece [a, b) of `reversed` is x[n-b, n-a) reversed.
  for (const std::vector<size_t>& cuts : Cuts()) {
    SquareSum sum;
    size_t at = 0;
    for (size_t c : cuts) {
      sum.AddReversed(x.data() + (x.size() - c), c - at);
      at = c;
    }
    sum.AddReversed(x.data(), x.size() - at);
    EXPECT_EQ(sum.Total(), want) << "cuts " << cuts.size();
  }
  // Mixed with Add: the same stream, the same bits.
  SquareSum mixed;
  mixed.AddReversed(x.data() + 500, x.size() - 500);  // reversed[0, 503)
  mixed.Add(reversed.data() + 503, 100);
  mixed.AddReversed(x.data(), 400);
  EXPECT_EQ(mixed.Total(), want);
}

TEST(SquareSumTest, BlocksGiveTheSameBitsOnAnyThreadsAndSplits) {
  // Blocks of 16 and 24 elements: the 1003 elements span many, the cuts
  // fall inside and on their edges, and a call's whole blocks go to up to
  // four threads of a pool. (Seed 2: a stream whose blocks of 16 and of 24 both
  // change the total.)
  const std::vector<float> x = WideFloats(1003, 2);
  const std::vector<float> reversed(x.rbegin(), x.rend());
  for (size_t block : {16, 24}) {
    const double want = LaneReference(x, block);
    const double want_reversed = LaneReference(reversed, block);
    // Blocks change the bits (else this test would not see them).
    EXPECT_NE(want, LaneReference(x));
    for (int threads : {1, 2, 4}) {
      ThreadPool pool(threads);
      for (const std::vector<size_t>& cuts : Cuts()) {
        SquareSum sum(block), back(block);
        size_t at = 0;
        for (size_t c : cuts) {
          sum.Add(x.data() + at, c - at, &pool);
          back.AddReversed(x.data() + (x.size() - c), c - at, &pool);
          at = c;
        }
        sum.Add(x.data() + at, x.size() - at, &pool);
        back.AddReversed(x.data(), x.size() - at, &pool);
        EXPECT_EQ(sum.Total(), want) << "block " << block << ", " << threads
                                     << " threads, cuts " << cuts.size();
        EXPECT_EQ(back.Total(), want_reversed)
            << "block " << block << ", " << threads << " threads, cuts "
            << cuts.size();
      }
    }
  }
}

TEST(SquareSumTest, NonFiniteElementsMakeTheTotalNonFinite) {
  const float inf = std::numeric_limits<float>::infinity();
  for (float bad : {std::nanf(""), inf, -inf}) {
    std::vector<float> x(20, 1.0f);
    x[13] = bad;
    SquareSum sum;
    sum.Add(x.data(), x.size());
    EXPECT_FALSE(std::isfinite(sum.Total())) << bad;
  }
  // The largest floats square to ~1.2e77: far from overflowing a double.
  std::vector<float> big(64, std::numeric_limits<float>::max());
  SquareSum sum;
  sum.Add(big.data(), big.size());
  EXPECT_TRUE(std::isfinite(sum.Total()));
}

}  // namespace
}  // namespace zeroshard
