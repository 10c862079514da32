// The memory and communication formulas of shared/DESIGN.md, as pure
// functions: what a formula says, not what an allocator rounds to (real
// ranges are padded to the partition alignment; tests compare within a
// tolerance).
//
// Model-state bytes per worker (Ψ parameters, N data-parallel workers,
// p/g bytes per parameter/gradient element, K optimizer bytes per parameter;
// mixed-precision Adam: p = g = 2, K = 12):
//
// clang-format off
//   stage | ZeRO paper (optimizer on the GPUs) | zeroshard (optimizer on servers)
//   ------+------------------------------------+----------------------------------------
//   0     | (p + g + K)Ψ                       | (p + g + K)Ψ  (local optimizer)
//   1     | (p + g)Ψ + KΨ/N                    | (p + g)Ψ
//   2     | pΨ + (g + K)Ψ/N                    | pΨ + gΨ/N
//   3     | (p + g + K)Ψ/N                     | p(Ψ - Ψp)/N + gΨ/N + live + persistent
//   3+srv | —                                  | gΨ/N + live + persistent
// clang-format on
//
// "3+srv" is stage 3 with offload_param = server: no parameter partition on
// the worker; its gradient partition stays. Ψp is the number of persistent
// parameters, kept whole on every worker (units of at most
// stage3_param_persistence_threshold elements): not in the partitioned
// p(Ψ - Ψp)/N but in persistent = pΨp. `live` is the window of gathered
// parameters (stage3_max_live_parameters / prefetch; never the persistent
// ones) in bytes as the caller measures or bounds it. With Ψp = 0, stage 3
// is shared/DESIGN.md's (p + g)Ψ/N + live.
//
// Communication per step per worker, in elements: 2Ψ for stages 0–2 (a
// reduce-scatter of the gradients and an all-gather of the parameters, or
// one all-reduce), 3Ψ for stage 3 (the parameters are gathered again in
// backward), less the two all-gathers of the Ψp persistent parameters:
// 3Ψ - 2Ψp. That is the paper's count (CommModel::kPaper), which the
// zeroshard tests record against. A ring or direct exchange moves only the
// other workers' shares: (W-1)/W of it (CommModel::kRing).
//
// Pure functions; thread-safe.
#ifndef ZEROSHARD_WORKER_ENGINE_ZERO_THEORY_H_
#define ZEROSHARD_WORKER_ENGINE_ZERO_THEORY_H_

#include <cstdint>

namespace zeroshard::engine {

struct ModelStateInputs {
  double num_params = 0;         // Ψ
  int num_workers = 1;           // N >= 1
  double param_bytes = 2;        // per parameter element on the worker
  double grad_bytes = 2;         // per gradient element on the worker
  double optimizer_bytes = 12;   // K: fp32 master + Adam m + v
  double live_window_bytes = 0;  // stage 3 only
  double persistent_params = 0;  // Ψp, stage 3 only: kept whole
};

// The ZeRO paper's column (Rajbhandari et al., SC'20, figure 1). `stage` in
// [0, 3]; NaN otherwise.
double ZeroPaperModelStateBytes(int stage, const ModelStateInputs& in);

// zeroshard's column: what one worker holds. `offload_param_to_server` only
// matters for stage 3. `stage` in [0, 3]; NaN otherwise.
double WorkerModelStateBytes(int stage, bool offload_param_to_server,
                             const ModelStateInputs& in);

// What the K servers hold together for stages 1–3: optimizer state (K bytes
// per parameter), the fp32 gradient accumulator (4 per parameter and per
// contribution slot) and the serving copy (`serving_bytes`, 2 for
// bf16/fp16, 0 when fp32 serves the master).
double ServerFleetModelStateBytes(double num_params, double optimizer_bytes,
                                  int contributions_per_step,
                                  double serving_bytes);

enum class CommModel {
  kPaper,  // 2Ψ (stages 0–2), 3Ψ - 2Ψp (stage 3)
  kRing,   // the same times (W - 1) / W
};

// Elements each worker sends (equivalently receives) per step. `stage` in
// [0, 3] (NaN otherwise), world_size >= 1; `persistent_params` (Ψp) only
// matters for stage 3.
double CommElementsPerStep(int stage, double num_params, int world_size,
                           CommModel model, double persistent_params = 0);

// CommElementsPerStep() times the element size in bytes.
double CommBytesPerStep(int stage, double num_params, int world_size,
                        CommModel model, double element_bytes,
                        double persistent_params = 0);

}  // namespace zeroshard::engine

#endif  // ZEROSHARD_WORKER_ENGINE_ZERO_THEORY_H_
