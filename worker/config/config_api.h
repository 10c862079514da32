// The C API's configuration functions (client/zeroshard.h, "configuration":
// zs_config_parse, zs_config_lr, zs_loss_scaler_*) and the one pair of
// conversions between its zs_train_config and the engine's EngineConfig.
// They live here, not in client/capi, because the parser and the schedules
// are the worker's (client/ may not include worker/); //client:libzeroshard.so
// links this library.
//
// Pure functions; thread-safe.
#ifndef ZEROSHARD_WORKER_CONFIG_CONFIG_API_H_
#define ZEROSHARD_WORKER_CONFIG_CONFIG_API_H_

#include "absl/status/statusor.h"
#include "client/zeroshard.h"
#include "worker/config/ds_config.h"

namespace zeroshard::config {

// The C struct of `config` (every byte set: unused ones are 0).
// INVALID_ARGUMENT when it does not fit: an optimizer type over 15 bytes,
// server addresses over 4095 bytes joined, or one holding a ','.
absl::StatusOr<zs_train_config> ToTrainConfig(const EngineConfig& config);

// The EngineConfig of `config`, every field checked (INVALID_ARGUMENT
// "config.<field> must be ..., got ..." for the first out of range).
// FromTrainConfig(ToTrainConfig(c)) is c but for auto_keys (empty) and the
// scaler options the struct does not carry (scale_factor 2,
// raise_error_at_min_scale: DeepSpeed's, which the parser always sets).
absl::StatusOr<EngineConfig> FromTrainConfig(const zs_train_config& config);

}  // namespace zeroshard::config

#endif  // ZEROSHARD_WORKER_CONFIG_CONFIG_API_H_
