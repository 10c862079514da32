// Learning-rate schedules of DeepSpeed's `scheduler` section as pure
// functions of the step: WarmupLR, WarmupDecayLR and WarmupCosineLR, with
// the formulas of deepspeed/runtime/lr_schedules.py (get_lr / get_lr_ratio,
// evaluated with last_batch_iteration = step), plus a constant rate when a
// config has no scheduler.
//
// With W = max(2, warmup_num_steps) (DeepSpeed's floor) and T =
// total_num_steps:
//
//   warmup fraction f(s), s < W:   log:    ln(s + 1) / ln(W)
//                                  linear: s / W
//   WarmupLR:       s < W: min + (max - min) * f(s);  else min + (max - min)
//   WarmupDecayLR:  s < W: as WarmupLR;
//                   else   min + (max - min) * max(0, (T - s) / max(1, T - W))
//   WarmupCosineLR: lr * ratio(s), where
//                   s < W: ratio = wmr + (1 - wmr) * f(s)
//                   else   ratio = max(0, cmr + (1 - cmr) *
//                                   (1 + cos(pi * (s - W + 1) / (T - W))) / 2)
//                   (wmr = warmup_min_ratio, cmr = cos_min_ratio)
//
// DeepSpeed quirks kept on purpose, so that a DeepSpeed config gives the
// same rates here: WarmupDecayLR reaches `min` at s = T and stays there;
// WarmupCosineLR reaches cmr at s = T - 1 and, past T, its cosine rises
// again (it is not clamped). The floating-point operations are Python's, in
// the same order, so the rates match DeepSpeed's to the last bit on the same
// libm.
//
// Step convention. LearningRate(s, i) is DeepSpeed's get_lr() at
// last_batch_iteration = i. DeepSpeed's engine makes the scheduler at
// iteration -1, whose constructor writes get_lr() of -1 into the optimizer
// (warmup_min_lr for WarmupLR and WarmupDecayLR, 0 for WarmupCosineLR), and
// steps it after every applied update (optimizer.step(), then
// lr_scheduler.step()). So update number k (0-based) trains at iteration
// k - 1's rate: UpdateLearningRate(s, k) = LearningRate(s, k - 1), which is
// what the engine, the C API (zs_config_lr) and Python use. As in DeepSpeed,
// an update skipped for fp16 overflow does not advance the schedule.
// (DeepSpeed's WarmupCosineLR writes its -1 value, [0.0], into the first
// parameter group only; zeroshard gives every group rate 0 at update 0.)
//
// Pure functions on value types; thread-safe.
#ifndef ZEROSHARD_WORKER_ENGINE_LR_SCHEDULE_H_
#define ZEROSHARD_WORKER_ENGINE_LR_SCHEDULE_H_

#include <cstdint>

namespace zeroshard::engine {

enum class LrScheduleType {
  kConstant,        // no `scheduler` section: optimizer.params.lr throughout
  kWarmupLR,        // warmup from warmup_min_lr to warmup_max_lr, then flat
  kWarmupDecayLR,   // WarmupLR, then linear decay to warmup_min_lr at T
  kWarmupCosineLR,  // ratio warmup, then cosine decay of optimizer lr
};

enum class WarmupType { kLog, kLinear };

// Which fields matter depends on `type`; defaults are DeepSpeed's.
struct LrSchedule {
  LrScheduleType type = LrScheduleType::kConstant;
  // kConstant: the rate. kWarmupCosineLR: the base rate the ratio scales
  // (DeepSpeed's org_lrs, i.e. optimizer.params.lr).
  double lr = 1e-3;
  // kWarmupLR, kWarmupDecayLR.
  double warmup_min_lr = 0.0;
  double warmup_max_lr = 1e-3;
  // All warmup schedules; values below 2 act as 2 (DeepSpeed).
  int64_t warmup_num_steps = 1000;
  WarmupType warmup_type = WarmupType::kLog;
  // kWarmupDecayLR, kWarmupCosineLR: T.
  int64_t total_num_steps = 0;
  // kWarmupCosineLR.
  double warmup_min_ratio = 0.0;
  double cos_min_ratio = 1e-4;
};

// DeepSpeed's effective warmup length: max(2, warmup_num_steps).
int64_t EffectiveWarmupSteps(const LrSchedule& schedule);

// DeepSpeed's get_lr() at last_batch_iteration = `step` (see the file
// comment). Before the first scheduler step (a negative step) that is
// warmup_min_lr for WarmupLR and WarmupDecayLR and 0 for WarmupCosineLR. For
// kWarmupCosineLR, T must differ from EffectiveWarmupSteps() (DeepSpeed
// divides by T - W; ParseDeepSpeedConfig rejects that config).
double LearningRate(const LrSchedule& schedule, int64_t step);

// The rate update number `update` (0-based: the updates applied before it)
// trains at under DeepSpeed's engine: LearningRate(schedule, update - 1).
double UpdateLearningRate(const LrSchedule& schedule, int64_t update);

}  // namespace zeroshard::engine

#endif  // ZEROSHARD_WORKER_ENGINE_LR_SCHEDULE_H_
