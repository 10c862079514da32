// What a DeepSpeed JSON config (worker/config/ds_config.h) means for the
// ZeRO engine: ZeroOptions (zero_options.h) from a parsed EngineConfig.
//
//   train_micro_batch_size_per_gpu  -> micro_batch (B); T comes from the
//                                      caller (not a DeepSpeed key)
//   gradient_accumulation_steps     -> gradient_accumulation_steps
//                                      (train_batch_size is checked against
//                                      the world size by the parser)
//   gradient_clipping               -> gradient_clipping
//   optimizer.params                -> lr_schedule.lr, beta1, beta2, eps,
//                                      weight_decay (matrices only)
//   scheduler                       -> lr_schedule
//   zero_optimization.stage, overlap_comm, reduce_bucket_size
//                                   -> the same fields (a reduce_bucket_size
//                                      of 0 is read as 1)
//   zero_optimization.stage3_prefetch_bucket_size (elements)
//                                   -> stage3_prefetch_units: how many of
//                                      the largest parameter units (a
//                                      block, or the embeddings) fit, at
//                                      least 1 when the size is > 0, at
//                                      most the number of units
//   zero_optimization.stage3_max_reuse_distance (elements; DeepSpeed's
//                                      default 1e9)
//                                   -> stage3_max_reuse_distance
//   zero_optimization.stage3_max_live_parameters (elements; DeepSpeed's
//                                      default 1e9)
//                                   -> stage3_max_live_parameters: the
//                                      device's parameter pool (a model on
//                                      a device; the host is not bounded)
//   zero_optimization.offload_param.device "server"
//                                   -> offload_param_server
//   zero_optimization.stage3_param_persistence_threshold (elements; the
//                                      parser's default is DeepSpeed's 1e5,
//                                      a negative value is INVALID_ARGUMENT)
//                                   -> stage3_param_persistence_threshold:
//                                      stage 3 keeps a parameter unit of at
//                                      most that many elements whole on
//                                      every rank (DeepSpeed decides per
//                                      tensor; zeroshard per unit, so a GPT-2
//                                      block's small biases and norms are
//                                      partitioned with their block)
//   zeroshard.server_aggregation    -> server_aggregation (stages 1-3)
//   zeroshard.alignment             -> not here: the communicator's part
//                                      alignment (the caller creates it)
//   zeroshard.servers               -> not here: the caller connects
//
//   fp16.enabled / bf16.enabled     -> precision (fp16's loss_scale,
//                                      initial_scale_power, loss_scale_window,
//                                      hysteresis, consecutive_hysteresis,
//                                      min_loss_scale -> loss_scaler)
// Accepted with a warning: a stage3_param_persistence_threshold that makes
// every unit persistent at stage 3 (no parameter is partitioned).
// allgather_bucket_size -> allgather_bucket_size (stages 1-2). Other
// zero_optimization keys (sub_group_size, ...) do not change the engine:
// stage 3 gathers unit by unit.
//
// Pure function; thread-safe.
#ifndef ZEROSHARD_WORKER_CONFIG_DS_OPTIONS_H_
#define ZEROSHARD_WORKER_CONFIG_DS_OPTIONS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/config/ds_config.h"
#include "worker/engine/model.h"
#include "worker/engine/zero_options.h"

namespace zeroshard::config {

// `layout` is the run's model (its units), `seq_len` its T (token models;
// others pass 1). Appends warnings to `warnings` when not null.
// INVALID_ARGUMENT from ValidateZeroOptions.
absl::StatusOr<engine::ZeroOptions> ZeroOptionsFromConfig(
    const config::EngineConfig& config, const engine::ModelLayout& layout,
    int seq_len, std::vector<std::string>* warnings);

}  // namespace zeroshard::config

#endif  // ZEROSHARD_WORKER_CONFIG_DS_OPTIONS_H_
