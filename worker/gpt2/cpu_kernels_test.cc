// The AVX2 row primitives against the portable ones (every length class:
// shorter than a vector, whole vectors, a tail), and the kernels that the
// model never calls or whose edges parity cannot see.
#include "worker/gpt2/cpu_kernels.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "worker/gpt2/vec.h"

namespace zeroshard::gpt2 {
namespace {

std::vector<float> Random(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// max |a - b| <= tol * max(1, max |b|).
void ExpectClose(const std::vector<float>& a, const std::vector<float>& b,
                 double tol, const char* what, int n) {
  double diff = 0, scale = 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(double{a[i]} - b[i]));
    scale = std::max(scale, std::fabs(double{b[i]}));
  }
  EXPECT_LE(diff, tol * scale) << what << " n=" << n;
}

TEST(VecTest, Avx2MatchesScalar) {
  const VecOps* avx2 = Avx2VecOps();
  if (avx2 == nullptr) GTEST_SKIP() << "CPU without AVX2";
  const VecOps& ref = ScalarVecOps();
  for (int n : {1, 7, 8, 13, 64, 72, 257}) {
    const std::vector<float> x = Random(n, n, 3.0f), y = Random(n, n + 1),
                             w = Random(n, n + 2), b = Random(n, n + 3);
    std::vector<float> o1(n), o2(n);
    avx2->gelu_forward(o1.data(), x.data(), n);
    ref.gelu_forward(o2.data(), x.data(), n);
    ExpectClose(o1, o2, 1e-6, "gelu_forward", n);
    avx2->gelu_backward(o1.data(), x.data(), y.data(), n);
    ref.gelu_backward(o2.data(), x.data(), y.data(), n);
    ExpectClose(o1, o2, 1e-5, "gelu_backward", n);
    EXPECT_EQ(avx2->max(x.data(), n), ref.max(x.data(), n));
    const float s1 = avx2->exp_sum(o1.data(), x.data(), 1.5f, n);
    const float s2 = ref.exp_sum(o2.data(), x.data(), 1.5f, n);
    EXPECT_NEAR(s1, s2, 1e-6 * s2);
    ExpectClose(o1, o2, 1e-6, "exp_sum", n);
    avx2->softmax_backward(o1.data(), w.data(), y.data(), n);
    ref.softmax_backward(o2.data(), w.data(), y.data(), n);
    ExpectClose(o1, o2, 1e-5, "softmax_backward", n);
    float m1, r1, m2, r2;
    avx2->layernorm_forward(o1.data(), &m1, &r1, x.data(), w.data(), b.data(),
                            n);
    ref.layernorm_forward(o2.data(), &m2, &r2, x.data(), w.data(), b.data(), n);
    ExpectClose(o1, o2, 1e-5, "layernorm_forward", n);
    EXPECT_NEAR(r1, r2, 1e-5 * r2);
    std::vector<float> dw1(n, 0.5f), db1(n, 0.25f), dw2 = dw1, db2 = db1;
    o1.assign(n, 1.0f);
    o2.assign(n, 1.0f);
    avx2->layernorm_backward(o1.data(), dw1.data(), db1.data(), y.data(),
                             x.data(), w.data(), m2, r2, n);
    ref.layernorm_backward(o2.data(), dw2.data(), db2.data(), y.data(),
                           x.data(), w.data(), m2, r2, n);
    ExpectClose(o1, o2, 1e-5, "layernorm_backward dinp", n);
    ExpectClose(dw1, dw2, 1e-6, "layernorm_backward dw", n);
    ExpectClose(db1, db2, 0, "layernorm_backward db", n);
  }
}

TEST(CpuKernelsTest, ResidualBackwardAddsToBothInputs) {
  auto k = CpuKernels::Create(2);
  ASSERT_TRUE(k.ok());
  const int n = 1000;
  std::vector<float> da(n, 1.0f), db(n, -1.0f);
  const std::vector<float> dout = Random(n, 1);
  (*k)->ResidualBackward(da.data(), db.data(), dout.data(), n);
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(da[i], 1.0f + dout[i]);
    ASSERT_EQ(db[i], -1.0f + dout[i]);
  }
}

// Padded columns get zero gradient; real ones sum to zero per row (softmax
// minus one-hot); losses are finite for large logits.
TEST(CpuKernelsTest, CrossEntropyIgnoresPadding) {
  auto k = CpuKernels::Create(2);
  ASSERT_TRUE(k.ok());
  const int N = 5, V = 11, Vp = 16;
  std::vector<float> logits = Random(N * Vp, 2, 30.0f), losses(N);
  for (int r = 0; r < N; ++r) logits[r * Vp + V] = 1e30f;  // padding: unseen
  const std::vector<int> targets = {0, 3, 10, 7, 7};
  (*k)->CrossEntropyForward(losses.data(), logits.data(), targets.data(), N, V,
                            Vp);
  std::vector<float> d(N * Vp, 9.0f);
  (*k)->CrossEntropyBackward(d.data(), logits.data(), targets.data(), 0.2f, N,
                             V, Vp);
  for (int r = 0; r < N; ++r) {
    EXPECT_TRUE(std::isfinite(losses[r]));
    EXPECT_GE(losses[r], 0.0f);
    double sum = 0;
    for (int j = 0; j < V; ++j) sum += d[r * Vp + j];
    EXPECT_NEAR(sum, 0.0, 1e-6);
    for (int j = V; j < Vp; ++j) EXPECT_EQ(d[r * Vp + j], 0.0f);
  }
}

TEST(CpuKernelsTest, CreateRejectsBadThreadCounts) {
  EXPECT_FALSE(CpuKernels::Create(0).ok());
  EXPECT_FALSE(CpuKernels::Create(100000).ok());
}

}  // namespace
}  // namespace zeroshard::gpt2
