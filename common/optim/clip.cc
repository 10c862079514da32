#include "common/optim/clip.h"

#include <algorithm>
#include <cmath>

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

void SquareSum::Add(const float* x, uint64_t n) {
  uint64_t i = 0;
  for (; i < n && (count_ + i) % 8 != 0; ++i) {  // to a lane-0 element
    const double v = x[i];
    lanes_[(count_ + i) % 8] += v * v;
  }
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) {
      const double v = x[i + j];
      lanes_[j] += v * v;
    }
  }
  for (; i < n; ++i) {
    const double v = x[i];
    lanes_[(count_ + i) % 8] += v * v;
  }
  count_ += n;
}

void SquareSum::AddReversed(const float* x, uint64_t n) {
  // Stream element i is x[n - 1 - i].
  uint64_t i = 0;
  for (; i < n && (count_ + i) % 8 != 0; ++i) {
    const double v = x[n - 1 - i];
    lanes_[(count_ + i) % 8] += v * v;
  }
  for (; i + 8 <= n; i += 8) {
    const float* p = x + (n - 8 - i);  // stream i + j is p[7 - j]
    for (int j = 0; j < 8; ++j) {
      const double v = p[7 - j];
      lanes_[j] += v * v;
    }
  }
  for (; i < n; ++i) {
    const double v = x[n - 1 - i];
    lanes_[(count_ + i) % 8] += v * v;
  }
  count_ += n;
}

double SquareSum::Total() const {
  return ((lanes_[0] + lanes_[4]) + (lanes_[1] + lanes_[5])) +
         ((lanes_[2] + lanes_[6]) + (lanes_[3] + lanes_[7]));
}

}  // namespace zeroshard
