// The section parsers behind ParseDeepSpeedConfig (internal to ds_config).
// Each reads one top-level section of the config through `root`, fills its
// part of EngineConfig with DeepSpeed's defaults and rules (ds_config.h),
// warns about unknown and unused keys through the reader's ReadLog, and
// returns INVALID_ARGUMENT naming the offending key's full path.
#ifndef ZEROSHARD_WORKER_CONFIG_DS_CONFIG_SECTIONS_H_
#define ZEROSHARD_WORKER_CONFIG_DS_CONFIG_SECTIONS_H_

#include "absl/status/status.h"
#include "worker/config/ds_config.h"
#include "worker/config/json_reader.h"

namespace zeroshard::config::internal {

// "optimizer".
absl::Status ParseOptimizer(ObjectReader& root, AdamWConfig* out);
// "scheduler"; the constant `optimizer_lr` when the section is absent.
absl::Status ParseScheduler(ObjectReader& root, double optimizer_lr,
                            engine::LrSchedule* out, ReadLog* log);
// "fp16" and "bf16" (or its old name "bfloat16"): precision, loss scaler.
absl::Status ParsePrecision(ObjectReader& root, EngineConfig* out);
// "torch_autocast" (after ParsePrecision).
absl::Status ParseTorchAutocast(ObjectReader& root, EngineConfig* out);
// "zero_optimization".
absl::Status ParseZero(ObjectReader& root, ZeroConfig* out, ReadLog* log);
// "aio": the NVMe tier's I/O settings (with an "nvme" offload).
absl::Status ParseAio(ObjectReader& root, NvmeConfig* nvme, ReadLog* log);
// "zeroshard".
absl::Status ParseZeroShard(ObjectReader& root, ZeroShardConfig* out);
// Warns about the top-level DeepSpeed keys zeroshard has no use for;
// checks dataloader_drop_last (read by Python's deepspeed_io) and
// gradient_allreduce_op (only "mean": "sum" would change the arithmetic).
absl::Status ReadUnusedTopLevel(ObjectReader& root);

}  // namespace zeroshard::config::internal

#endif  // ZEROSHARD_WORKER_CONFIG_DS_CONFIG_SECTIONS_H_
