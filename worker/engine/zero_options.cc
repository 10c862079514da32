#include "worker/engine/zero_options.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace zeroshard::engine {

absl::Status ValidateZeroOptions(const ZeroOptions& o) {
  auto bad = [](const char* field, auto value, const char* rule) {
    return absl::InvalidArgumentError(
        absl::StrCat("ZeroOptions.", field, " = ", value, ": ", rule));
  };
  if (o.stage < 0 || o.stage > 3) return bad("stage", o.stage, "must be 0..3");
  if (o.micro_batch < 1)
    return bad("micro_batch", o.micro_batch, "must be >= 1");
  if (o.seq_len < 1) return bad("seq_len", o.seq_len, "must be >= 1");
  if (o.gradient_accumulation_steps < 1) {
    return bad("gradient_accumulation_steps", o.gradient_accumulation_steps,
               "must be >= 1");
  }
  if (!(o.lr_schedule.lr >= 0))
    return bad("lr_schedule.lr", o.lr_schedule.lr, "must be >= 0");
  if (!(o.beta1 >= 0 && o.beta1 < 1))
    return bad("beta1", o.beta1, "must be in [0, 1)");
  if (!(o.beta2 >= 0 && o.beta2 < 1))
    return bad("beta2", o.beta2, "must be in [0, 1)");
  if (!(o.eps > 0)) return bad("eps", o.eps, "must be > 0");
  if (!(o.weight_decay >= 0))
    return bad("weight_decay", o.weight_decay, "must be >= 0");
  if (o.reduce_bucket_size < 1) {
    return bad("reduce_bucket_size", o.reduce_bucket_size, "must be >= 1");
  }
  if (o.stage3_prefetch_units < 0) {
    return bad("stage3_prefetch_units", o.stage3_prefetch_units,
               "must be >= 0");
  }
  if (o.offload_param_server && o.stage != 3) {
    return bad("offload_param_server", "true", "needs stage 3");
  }
  if (o.server_aggregation && o.stage == 0) {
    return bad("server_aggregation", "true",
               "needs stage 1-3 (stage 0 has no servers)");
  }
  if (o.precision == engine::Precision::kFp16) {
    const engine::LossScalerOptions& l = o.loss_scaler;
    if (!l.dynamic && !(l.static_scale > 0 && std::isfinite(l.static_scale))) {
      return bad("loss_scaler.static_scale", l.static_scale, "must be > 0");
    }
    if (l.dynamic && !(l.initial_scale > 0 && std::isfinite(l.initial_scale))) {
      return bad("loss_scaler.initial_scale", l.initial_scale, "must be > 0");
    }
    if (l.scale_window < 1) {
      return bad("loss_scaler.scale_window", l.scale_window, "must be >= 1");
    }
    if (l.hysteresis < 1) {
      return bad("loss_scaler.hysteresis", l.hysteresis, "must be >= 1");
    }
    if (!(l.min_scale > 0)) {
      return bad("loss_scaler.min_scale", l.min_scale, "must be > 0");
    }
  }
  if (o.threads < 1) return bad("threads", o.threads, "must be >= 1");
  if (o.checkpoint_interval < 0) {
    return bad("checkpoint_interval", o.checkpoint_interval, "must be >= 0");
  }
  if (o.checkpoint_interval > 0 && o.stage == 0) {
    return bad("checkpoint_interval", o.checkpoint_interval,
               "needs stage 1-3 (servers hold the state)");
  }
  if (!(o.recovery_timeout_seconds > 0)) {
    return bad("recovery_timeout_seconds", o.recovery_timeout_seconds,
               "must be > 0");
  }
  if (o.stage > 0 && o.job_id.empty())
    return bad("job_id", "''", "must be set");
  if (o.delayed_update_from < 0) {
    return bad("delayed_update_from", o.delayed_update_from,
               "must be >= 0 (0: off)");
  }
  if (o.delayed_update_from > 0) {
    if (o.stage != 1 && o.stage != 2) {
      return bad("delayed_update_from", o.delayed_update_from,
                 "needs stage 1 or 2");
    }
    if (o.checkpoint_interval > 0) {
      return bad("delayed_update_from", o.delayed_update_from,
                 "needs checkpoint_interval = 0 (no recovery)");
    }
    if (o.server_aggregation) {
      return bad("delayed_update_from", o.delayed_update_from,
                 "cannot be used with server_aggregation");
    }
  }
  return absl::OkStatus();
}

}  // namespace zeroshard::engine
