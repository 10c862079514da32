// The loss scaler of a run and what a trainer state records of it: one rule
// for the C++ engine (engine.cc) and the C API (zs_loss_scaler_init,
// zs_loss_scaler_update), so both record the same state.
//
// A record is a LossScalerState as TrainerState / zs_trainer_state hold it:
// the scale always; hysteresis_left, iteration and last_overflow_iteration
// only for a dynamic scaler, else 0 — hysteresis_left 0 means "not
// recorded" (fp32, bf16, a static fp16 scale), and a scaler continued from
// such a record starts afresh.
//
// Pure functions on value types; thread-safe.
#ifndef ZEROSHARD_WORKER_ENGINE_SCALER_RECORD_H_
#define ZEROSHARD_WORKER_ENGINE_SCALER_RECORD_H_

#include "absl/status/statusor.h"
#include "worker/engine/loss_scaler.h"
#include "worker/engine/precision.h"

namespace zeroshard::engine {

// The scaler a run of `precision` uses: fp16 the configured one, others a
// static scale 1 (bf16 and fp32 need no loss scaling).
LossScalerOptions ScalerOptionsFor(Precision precision,
                                   const LossScalerOptions& configured);

// What a trainer state records of `scaler` (see the file comment).
LossScalerState RecordOf(const LossScaler& scaler);

// The scaler of `options` continuing from `record`: afresh when the record
// has none (hysteresis_left 0), else LossScaler::Restore's (its
// INVALID_ARGUMENT for a state it rejects).
absl::StatusOr<LossScaler> ScalerFromRecord(const LossScalerOptions& options,
                                            const LossScalerState& record);

}  // namespace zeroshard::engine

#endif  // ZEROSHARD_WORKER_ENGINE_SCALER_RECORD_H_
