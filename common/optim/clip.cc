#include "common/optim/clip.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace zeroshard {

double GlobalGradNorm(absl::Span<const double> partial_sums_of_squares) {
  double sum = 0;
  for (double partial : partial_sums_of_squares) sum += partial;
  return std::sqrt(sum);
}

float ClipCoefficient(double total_norm, double max_norm) {
  if (!(max_norm > 0)) return 1.0f;
  // torch: (total_norm + 1e-6) in fp32, then reciprocal() * max_norm.
  const float denominator = static_cast<float>(total_norm) + 1e-6f;
  const float coef = (1.0f / denominator) * static_cast<float>(max_norm);
  return std::min(coef, 1.0f);
}

StepDecision DecideStep(absl::Span<const double> partial_sums_of_squares,
                        bool any_nonfinite, double loss_scale,
                        double max_norm) {
  StepDecision d;
  d.grad_norm = GlobalGradNorm(partial_sums_of_squares) / loss_scale;
  if (any_nonfinite || !std::isfinite(d.grad_norm)) {
    d.skip = true;
    return d;
  }
  const float inverse_scale = static_cast<float>(1.0 / loss_scale);
  d.grad_scale = ClipCoefficient(d.grad_norm, max_norm) * inverse_scale;
  return d;
}

namespace {

double Tree(const double* l) {
  return ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]));
}

// Element k of a call appending n floats at x: x[k], or x[n-1-k] reversed.
template <bool kReversed>
float At(const float* x, uint64_t n, uint64_t k) {
  return kReversed ? x[n - 1 - k] : x[k];
}

// The total of one whole block: the call's elements [k0, k0 + size), the
// first of them in lane 0.
template <bool kReversed>
double BlockTotal(const float* x, uint64_t n, uint64_t k0, uint64_t size) {
  double l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (uint64_t k = k0; k < k0 + size; k += 8) {
    for (int j = 0; j < 8; ++j) {
      const double v = At<kReversed>(x, n, k + j);
      l[j] += v * v;
    }
  }
  return Tree(l);
}

}  // namespace

SquareSum::SquareSum(uint64_t block_size)
    : block_size_(std::max<uint64_t>(8, block_size / 8 * 8)) {}

template <bool kReversed>
void SquareSum::AddToLanes(const float* x, uint64_t n, uint64_t k0,
                           uint64_t k1) {
  uint64_t k = k0;
  for (; k < k1 && count_ % 8 != 0; ++k, ++count_) {
    const double v = At<kReversed>(x, n, k);
    lanes_[count_ % 8] += v * v;
  }
  for (; k + 8 <= k1; k += 8, count_ += 8) {
    for (int j = 0; j < 8; ++j) {
      const double v = At<kReversed>(x, n, k + j);
      lanes_[j] += v * v;
    }
  }
  for (; k < k1; ++k, ++count_) {
    const double v = At<kReversed>(x, n, k);
    lanes_[count_ % 8] += v * v;
  }
  if (count_ % block_size_ == 0 && count_ > 0 && k1 > k0) {
    blocks_ += Tree(lanes_);  // the block is finished
    std::fill(lanes_, lanes_ + 8, 0.0);
  }
}

template <bool kReversed>
void SquareSum::Append(const float* x, uint64_t n, ThreadPool* pool) {
  // The current block's rest.
  uint64_t k = 0;
  if (count_ % block_size_ != 0) {
    k = std::min(n, block_size_ - count_ % block_size_);
    AddToLanes<kReversed>(x, n, 0, k);
  }
  // Whole blocks, each on its own, then added in order.
  const uint64_t blocks = (n - k) / block_size_;
  if (blocks > 0) {
    std::vector<double> totals(blocks);
    const auto sum = [&](size_t b) {
      totals[b] = BlockTotal<kReversed>(x, n, k + b * block_size_, block_size_);
    };
    if (pool != nullptr) {
      pool->ParallelFor(blocks, sum);
    } else {
      for (size_t b = 0; b < blocks; ++b) sum(b);
    }
    for (double total : totals) blocks_ += total;
    k += blocks * block_size_;
    count_ += blocks * block_size_;
  }
  // The rest starts a block.
  AddToLanes<kReversed>(x, n, k, n);
}

void SquareSum::Add(const float* x, uint64_t n, ThreadPool* pool) {
  Append<false>(x, n, pool);
}

void SquareSum::AddReversed(const float* x, uint64_t n, ThreadPool* pool) {
  Append<true>(x, n, pool);
}

double SquareSum::Total() const { return blocks_ + Tree(lanes_); }

}  // namespace zeroshard
