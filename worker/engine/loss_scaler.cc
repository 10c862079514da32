#include "worker/engine/loss_scaler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace zeroshard::engine {

LossScaler::LossScaler(const LossScalerOptions& options)
    : options_(options),
      scale_(options.dynamic ? options.initial_scale : options.static_scale),
      hysteresis_left_(options.hysteresis) {}

absl::Status LossScaler::Update(bool overflow) {
  if (!options_.dynamic) return absl::OkStatus();
  if (overflow) {
    if (options_.hysteresis == 1 || hysteresis_left_ == 1) {
      if (scale_ == options_.min_scale && options_.raise_error_at_min_scale) {
        return absl::FailedPreconditionError(absl::StrCat(
            "fp16 gradients overflowed with the loss scale already at its "
            "minimum ",
            options_.min_scale, "; cannot decrease it further"));
      }
      scale_ = std::max(scale_ / options_.scale_factor, options_.min_scale);
    } else {
      --hysteresis_left_;
    }
    last_overflow_iteration_ = iteration_;
  } else {
    if (options_.consecutive_hysteresis) {
      hysteresis_left_ = options_.hysteresis;
    }
    if ((iteration_ - last_overflow_iteration_) % options_.scale_window == 0) {
      if (!options_.consecutive_hysteresis) {
        hysteresis_left_ = options_.hysteresis;
      }
      scale_ *= options_.scale_factor;
    }
  }
  ++iteration_;
  return absl::OkStatus();
}

}  // namespace zeroshard::engine
