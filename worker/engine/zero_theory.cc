#include "worker/engine/zero_theory.h"

#include <limits>

namespace zeroshard::engine {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

}  // namespace

double ZeroPaperModelStateBytes(int stage, const ModelStateInputs& in) {
  const double psi = in.num_params;
  const double n = in.num_workers;
  const double p = in.param_bytes, g = in.grad_bytes, k = in.optimizer_bytes;
  switch (stage) {
    case 0:
      return (p + g + k) * psi;
    case 1:
      return (p + g) * psi + k * psi / n;
    case 2:
      return p * psi + (g + k) * psi / n;
    case 3:
      return (p + g + k) * psi / n;
    default:
      return kNaN;
  }
}

double WorkerModelStateBytes(int stage, bool offload_param_to_server,
                             const ModelStateInputs& in) {
  const double psi = in.num_params;
  const double n = in.num_workers;
  const double p = in.param_bytes, g = in.grad_bytes;
  const double psi_p = in.persistent_params;
  // Stage 3 with or without offload: gradient partition, live window and
  // the persistent parameters whole.
  const double stage3 = g * psi / n + in.live_window_bytes + p * psi_p;
  switch (stage) {
    case 0:
      return (p + g + in.optimizer_bytes) * psi;
    case 1:
      return (p + g) * psi;
    case 2:
      return p * psi + g * psi / n;
    case 3:
      if (offload_param_to_server) return stage3;
      return p * (psi - psi_p) / n + stage3;
    default:
      return kNaN;
  }
}

double ServerFleetModelStateBytes(double num_params, double optimizer_bytes,
                                  int contributions_per_step,
                                  double serving_bytes) {
  const double accumulator_bytes = 4.0 * contributions_per_step;
  return (optimizer_bytes + accumulator_bytes + serving_bytes) * num_params;
}

double CommElementsPerStep(int stage, double num_params, int world_size,
                           CommModel model, double persistent_params) {
  if (stage < 0 || stage > 3) return kNaN;
  const double elements =
      stage == 3 ? 3 * num_params - 2 * persistent_params : 2 * num_params;
  const double share = model == CommModel::kRing
                           ? static_cast<double>(world_size - 1) / world_size
                           : 1.0;
  return elements * share;
}

double CommBytesPerStep(int stage, double num_params, int world_size,
                        CommModel model, double element_bytes,
                        double persistent_params) {
  return CommElementsPerStep(stage, num_params, world_size, model,
                             persistent_params) *
         element_bytes;
}

}  // namespace zeroshard::engine
