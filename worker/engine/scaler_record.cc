#include "worker/engine/scaler_record.h"

#include "common/status_macros.h"

namespace zeroshard::engine {

LossScalerOptions ScalerOptionsFor(Precision precision,
                                   const LossScalerOptions& configured) {
  if (precision == Precision::kFp16) return configured;
  return LossScalerOptions();  // static, scale 1
}

LossScalerState RecordOf(const LossScaler& scaler) {
  if (scaler.dynamic()) return scaler.state();
  LossScalerState record;
  record.scale = scaler.scale();
  record.hysteresis_left = 0;  // not recorded
  record.iteration = 0;
  record.last_overflow_iteration = 0;
  return record;
}

absl::StatusOr<LossScaler> ScalerFromRecord(const LossScalerOptions& options,
                                            const LossScalerState& record) {
  LossScaler scaler(options);
  if (record.hysteresis_left != 0) ZS_RETURN_IF_ERROR(scaler.Restore(record));
  return scaler;
}

}  // namespace zeroshard::engine
