// The block plan of causal attention (causal_plan.h) run on the CPU with a
// plain product: every block layout gives the unmasked layer's results,
// and the blocks cover each output row once.
#include "worker/gpt2/cuda/causal_plan.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace zeroshard::gpt2 {
namespace {

using Mat = std::vector<float>;  // row-major

// C(M,N) = alpha op(A) op(B), each operand given by its block's start and
// its row stride, as CudaKernels passes them to cuBLAS.
void Gemm(const BlockGemm& g, float alpha, const float* a, int lda,
          const float* b, int ldb, float* c, int ldc) {
  const float* ab = a + g.a_row * lda + g.a_col;
  const float* bb = b + g.b_row * ldb + g.b_col;
  float* cb = c + g.c_row * ldc;
  for (int i = 0; i < g.M; ++i) {
    for (int j = 0; j < g.N; ++j) {
      double s = 0;
      for (int k = 0; k < g.K; ++k) {
        const float x = g.trans_a ? ab[k * lda + i] : ab[i * lda + k];
        const float y = g.trans_b ? bb[j * ldb + k] : bb[k * ldb + j];
        s += double{x} * y;
      }
      cb[i * ldc + j] = static_cast<float>(alpha * s);
    }
  }
}

// The causal softmax as the CUDA kernels do it: reads [0, t] of row t,
// writes every column (0 above the diagonal).
void SoftmaxForward(float* att, int T) {
  for (int t = 0; t < T; ++t) {
    float* row = att + t * T;
    double m = -INFINITY, sum = 0;
    for (int j = 0; j <= t; ++j) m = std::fmax(m, row[j]);
    for (int j = 0; j <= t; ++j) sum += std::exp(row[j] - m);
    for (int j = 0; j < T; ++j) {
      row[j] = j <= t ? static_cast<float>(std::exp(row[j] - m) / sum) : 0.f;
    }
  }
}

void SoftmaxBackward(float* ds, const float* p, int T) {  // ds holds dP
  for (int t = 0; t < T; ++t) {
    double dot = 0;
    for (int j = 0; j <= t; ++j) dot += double{p[t * T + j]} * ds[t * T + j];
    for (int j = 0; j < T; ++j) {
      ds[t * T + j] =
          j <= t ? static_cast<float>(p[t * T + j] * (ds[t * T + j] - dot))
                 : 0.f;
    }
  }
}

struct Results {
  Mat p, y, dq, dk, dv;
};

// One head's forward and backward with the products split into `blocks`.
// Scratch that a block does not write starts as NaN, so a read of it shows.
Results RunHead(const Mat& q, const Mat& k, const Mat& v, const Mat& dy, int T,
                int hs, const std::vector<CausalBlock>& blocks) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  Results r;
  r.p.assign(T * T, nan);
  r.y.assign(T * hs, nan);
  r.dq.assign(T * hs, nan);
  r.dk.assign(T * hs, nan);
  r.dv.assign(T * hs, nan);
  Mat ds(T * T, nan);
  using P = AttentionProduct;
  for (CausalBlock b : blocks) {
    Gemm(PlanBlock(P::kScores, b, T, hs), scale, q.data(), hs, k.data(), hs,
         r.p.data(), T);
  }
  SoftmaxForward(r.p.data(), T);
  for (CausalBlock b : blocks) {
    Gemm(PlanBlock(P::kValues, b, T, hs), 1, r.p.data(), T, v.data(), hs,
         r.y.data(), hs);
    Gemm(PlanBlock(P::kScoresGrad, b, T, hs), 1, dy.data(), hs, v.data(), hs,
         ds.data(), T);
    Gemm(PlanBlock(P::kValuesGrad, b, T, hs), 1, r.p.data(), T, dy.data(), hs,
         r.dv.data(), hs);
  }
  SoftmaxBackward(ds.data(), r.p.data(), T);
  for (CausalBlock b : blocks) {
    Gemm(PlanBlock(P::kQueryGrad, b, T, hs), scale, ds.data(), T, k.data(), hs,
         r.dq.data(), hs);
    Gemm(PlanBlock(P::kKeyGrad, b, T, hs), scale, ds.data(), T, q.data(), hs,
         r.dk.data(), hs);
  }
  return r;
}

// The reference: one head's layer with the full, unmasked products,
// written out without the plan.
Results Reference(const Mat& q, const Mat& k, const Mat& v, const Mat& dy,
                  int T, int hs) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  // C(n,m) = alpha sum_i x(r,i) y(c,i) over i < len, x/y read through
  // accessors so each product states its operands.
  auto product = [](int rows, int cols, int len, float alpha, auto x, auto y) {
    Mat c(rows * cols);
    for (int r = 0; r < rows; ++r) {
      for (int col = 0; col < cols; ++col) {
        double s = 0;
        for (int i = 0; i < len; ++i) s += double{x(r, i)} * y(col, i);
        c[r * cols + col] = static_cast<float>(alpha * s);
      }
    }
    return c;
  };
  auto at = [](const Mat& m, int ld) {
    return [&m, ld](int r, int c) { return m[r * ld + c]; };
  };
  auto tr = [](const Mat& m, int ld) {
    return [&m, ld](int r, int c) { return m[c * ld + r]; };
  };
  Results r;
  r.p = product(T, T, hs, scale, at(q, hs), at(k, hs));  // Q K^T
  SoftmaxForward(r.p.data(), T);
  r.y = product(T, hs, T, 1, at(r.p, T), tr(v, hs));     // P V
  Mat ds = product(T, T, hs, 1, at(dy, hs), at(v, hs));  // dY V^T
  r.dv = product(T, hs, T, 1, tr(r.p, T), tr(dy, hs));   // P^T dY
  SoftmaxBackward(ds.data(), r.p.data(), T);
  r.dq = product(T, hs, T, scale, at(ds, T), tr(k, hs));  // dS K
  r.dk = product(T, hs, T, scale, tr(ds, T), tr(q, hs));  // dS^T Q
  return r;
}

void ExpectNear(const Mat& got, const Mat& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << "[" << i << "]";
    ASSERT_NEAR(got[i], want[i], 1e-5 * (1 + std::fabs(want[i])))
        << what << "[" << i << "]";
  }
}

TEST(CausalBlocksTest, CoverInOrderOnAlignedBoundaries) {
  for (int T : {1, 5, 37, 64, 100, 1024}) {
    for (int n : {0, 1, 2, 3, 4, 5, 8, 64}) {
      for (int align : {1, 4, 32}) {
        const std::vector<CausalBlock> b = CausalBlocks(T, n, align);
        ASSERT_FALSE(b.empty());
        EXPECT_LE(static_cast<int>(b.size()), std::max(n, 1));
        EXPECT_EQ(b.front().begin, 0);
        EXPECT_EQ(b.back().end, T);
        for (size_t i = 0; i < b.size(); ++i) {
          EXPECT_LT(b[i].begin, b[i].end);
          EXPECT_EQ(b[i].begin % align, 0) << T << " " << n << " " << align;
          if (i > 0) {
            EXPECT_EQ(b[i].begin, b[i - 1].end);
          }
        }
      }
    }
  }
  const std::vector<CausalBlock> b = CausalBlocks(1024, 4, 32);
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b[1].begin, 256);
  EXPECT_EQ(b[3].begin, 768);
  EXPECT_TRUE(CausalBlocks(0, 4, 32).empty());
}

TEST(CausalBlocksTest, CountFromSequenceLength) {
  EXPECT_EQ(CausalBlockCount(1024, 0), 4);
  EXPECT_EQ(CausalBlockCount(64, 0), 1);
  EXPECT_EQ(CausalBlockCount(1 << 14, 0), 8);
  EXPECT_EQ(CausalBlockCount(64, 3), 3);
}

// Against the unmasked products written out directly: the same
// probabilities, output and gradients for every split (one block
// included), with no unwritten entry read (NaN scratch).
TEST(CausalPlanTest, BlocksGiveTheUnmaskedResults) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int T : {1, 9, 37, 64}) {
    const int hs = 8;
    auto random = [&](int n) {
      Mat m(n);
      for (float& x : m) x = dist(rng);
      return m;
    };
    const Mat q = random(T * hs), k = random(T * hs), v = random(T * hs),
              dy = random(T * hs);
    const Results want = Reference(q, k, v, dy, T, hs);
    for (int n : {1, 2, 3, 5, T}) {
      for (int align : {1, 4}) {
        SCOPED_TRACE(testing::Message()
                     << "T=" << T << " blocks=" << n << " align=" << align);
        const Results got =
            RunHead(q, k, v, dy, T, hs, CausalBlocks(T, n, align));
        ExpectNear(got.p, want.p, "P");
        ExpectNear(got.y, want.y, "Y");
        ExpectNear(got.dq, want.dq, "dQ");
        ExpectNear(got.dk, want.dk, "dK");
        ExpectNear(got.dv, want.dv, "dV");
      }
    }
  }
}

// The work the plan saves: (n+1)/(2n) of the unmasked multiply-adds for n
// equal blocks, summed over the six products.
TEST(CausalPlanTest, WorkShrinksWithBlocks) {
  const int T = 1024, hs = 64;
  auto work = [&](int n) {
    double w = 0;
    for (CausalBlock b : CausalBlocks(T, n, 32)) {
      for (int p = 0; p < 6; ++p) {
        const BlockGemm g =
            PlanBlock(static_cast<AttentionProduct>(p), b, T, hs);
        w += static_cast<double>(g.M) * g.N * g.K;
      }
    }
    return w;
  };
  EXPECT_DOUBLE_EQ(work(1), 6.0 * T * T * hs);
  EXPECT_DOUBLE_EQ(work(4) / work(1), 5.0 / 8);
  EXPECT_DOUBLE_EQ(work(2) / work(1), 3.0 / 4);
}

}  // namespace
}  // namespace zeroshard::gpt2
