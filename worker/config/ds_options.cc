#include "worker/config/ds_options.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/engine/zero_plan.h"

namespace zeroshard::config {
namespace {

void Warn(std::vector<std::string>* warnings, std::string text) {
  if (warnings != nullptr) warnings->push_back(std::move(text));
}

}  // namespace

absl::StatusOr<engine::ZeroOptions> ZeroOptionsFromConfig(
    const config::EngineConfig& config, const engine::ModelLayout& layout,
    int seq_len, std::vector<std::string>* warnings) {
  const config::ZeroConfig& z = config.zero;
  engine::ZeroOptions o;
  o.stage = z.stage;
  o.micro_batch = static_cast<int>(config.batch.micro_batch_per_worker);
  o.seq_len = seq_len;
  o.gradient_accumulation_steps =
      static_cast<int>(config.batch.gradient_accumulation_steps);
  o.gradient_clipping = config.gradient_clipping;
  o.lr_schedule = config.lr_schedule;
  o.beta1 = config.optimizer.beta1;
  o.beta2 = config.optimizer.beta2;
  o.eps = config.optimizer.eps;
  o.bias_correction = config.optimizer.bias_correction;
  o.weight_decay = config.optimizer.weight_decay;
  o.precision = config.precision;
  o.loss_scaler = config.loss_scaler;
  o.overlap_comm = z.overlap_comm;
  o.reduce_bucket_size =
      static_cast<uint64_t>(std::max<int64_t>(1, z.reduce_bucket_size));
  // The parser rejects a negative size (INVALID_ARGUMENT naming it).
  o.allgather_bucket_size = static_cast<uint64_t>(z.allgather_bucket_size);
  o.offload_param_server = z.offload_param == config::OffloadDevice::kServer;
  o.checkpoint_interval = config.zeroshard.checkpoint_interval;
  o.server_aggregation = config.zeroshard.server_aggregation;
  if (config.torch_autocast) {
    return absl::InvalidArgumentError(
        "torch_autocast.enabled: for a torch module's forward (Python's "
        "zeroshard.initialize); this GPT-2 computes in fp32 or in the dtype "
        "of the bf16 or fp16 section");
  }
  const config::ZeroShardConfig& zs = config.zeroshard;
  if (zs.delayed_parameter_update) {
    const char* why = nullptr;
    if (z.stage != 1 && z.stage != 2) {
      why = "needs zero_optimization.stage 1 or 2";
    } else if (zs.checkpoint_interval > 0) {
      why =
          "cannot be used with zeroshard.checkpoint_interval (no recovery "
          "with the delayed update)";
    } else if (zs.server_aggregation) {
      why = "cannot be used with zeroshard.server_aggregation";
    }
    if (why != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("zeroshard.delayed_parameter_update: ", why, " (stage ",
                       z.stage, ", checkpoint_interval ",
                       zs.checkpoint_interval, ", server_aggregation ",
                       zs.server_aggregation ? "true" : "false", ")"));
    }
    o.delayed_update_from = zs.delayed_update_warmup_steps;
  }

  // The parser rejects a negative threshold (INVALID_ARGUMENT naming it).
  o.stage3_param_persistence_threshold =
      static_cast<uint64_t>(z.stage3_param_persistence_threshold);
  o.stage3_max_reuse_distance =
      static_cast<uint64_t>(z.stage3_max_reuse_distance);
  o.stage3_max_live_parameters =
      static_cast<uint64_t>(z.stage3_max_live_parameters);

  const std::vector<Range>& units = layout.units;
  uint64_t largest = 1;
  for (const Range& u : units) largest = std::max(largest, u.size());
  if (o.stage == 3 && largest <= o.stage3_param_persistence_threshold) {
    Warn(warnings,
         absl::StrCat("zero_optimization.stage3_param_persistence_threshold (",
                      o.stage3_param_persistence_threshold,
                      "): every parameter unit is persistent (the largest has ",
                      largest, " elements); stage 3 partitions no parameters"));
  }
  const uint64_t fit =
      static_cast<uint64_t>(z.stage3_prefetch_bucket_size) / largest;
  o.stage3_prefetch_units =
      z.stage3_prefetch_bucket_size == 0
          ? 0
          : static_cast<int>(std::clamp<uint64_t>(fit, 1, units.size()));
  ZS_RETURN_IF_ERROR(engine::ValidateZeroOptions(o));
  return o;
}

}  // namespace zeroshard::config
