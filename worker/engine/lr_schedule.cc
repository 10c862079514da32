#include "worker/engine/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace zeroshard::engine {
namespace {

constexpr double kPi = 3.141592653589793;  // Python's math.pi

// f(s) of the file comment, for s < W.
double WarmupFraction(WarmupType type, int64_t step, int64_t warmup) {
  if (type == WarmupType::kLinear) {
    return static_cast<double>(step) / static_cast<double>(warmup);
  }
  // DeepSpeed precomputes 1 / ln(W) and multiplies.
  const double inverse_log_warmup = 1.0 / std::log(static_cast<double>(warmup));
  return inverse_log_warmup * std::log(static_cast<double>(step + 1));
}

double WarmupCosineRatio(const LrSchedule& s, int64_t step, int64_t warmup) {
  if (step < warmup) {
    const double f = WarmupFraction(s.warmup_type, step, warmup);
    return s.warmup_min_ratio + f * (1.0 - s.warmup_min_ratio);
  }
  const double real_last_step = static_cast<double>(step - warmup + 1);
  const double real_total_steps =
      static_cast<double>(s.total_num_steps - warmup);
  const double cosine =
      (1.0 + std::cos(kPi * real_last_step / real_total_steps)) / 2.0;
  return std::max(0.0, s.cos_min_ratio + (1.0 - s.cos_min_ratio) * cosine);
}

}  // namespace

int64_t EffectiveWarmupSteps(const LrSchedule& schedule) {
  return std::max<int64_t>(2, schedule.warmup_num_steps);
}

double LearningRate(const LrSchedule& s, int64_t step) {
  if (s.type == LrScheduleType::kConstant) return s.lr;
  if (step < 0) {  // get_lr() before the first step
    return s.type == LrScheduleType::kWarmupCosineLR ? 0.0 : s.warmup_min_lr;
  }
  const int64_t warmup = EffectiveWarmupSteps(s);
  if (s.type == LrScheduleType::kWarmupCosineLR) {
    return s.lr * WarmupCosineRatio(s, step, warmup);
  }
  double gamma = 1.0;
  if (step < warmup) {
    gamma = WarmupFraction(s.warmup_type, step, warmup);
  } else if (s.type == LrScheduleType::kWarmupDecayLR) {
    const double remaining = static_cast<double>(s.total_num_steps - step);
    const double span =
        std::max(1.0, static_cast<double>(s.total_num_steps - warmup));
    gamma = std::max(0.0, remaining / span);
  }
  const double delta = s.warmup_max_lr - s.warmup_min_lr;
  return s.warmup_min_lr + delta * gamma;
}

double UpdateLearningRate(const LrSchedule& s, int64_t update) {
  return LearningRate(s, update - 1);
}

}  // namespace zeroshard::engine
