// Run metrics: the JSON-lines records a training worker writes
// (zeroshard-worker --metrics_file) and the launcher reads back for
// its progress line, its merged metrics file and its report.
//
// One JSON object per line, flat, numbers, null and booleans only (besides
// "event"); a value that is not finite (an fp16 overflow step's gradient
// norm) is null, as JSON has no NaN or Infinity:
//   {"event":"start","rank":0,"world":2,"stage":3,"params":113408,...}
//   {"event":"step","step":1,"loss":5.61,"lr":3e-05,"grad_norm":2.1,...}
//   {"event":"end","eval_loss":1.93,"eval_tokens":512}
// Field names are listed with the writers below; a reader must ignore
// fields it does not know. The reader (JsonNumber) understands exactly
// this format, not JSON in general.
//
// Pure functions; thread-safe.
#ifndef ZEROSHARD_WORKER_TRAIN_RUN_METRICS_H_
#define ZEROSHARD_WORKER_TRAIN_RUN_METRICS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "worker/engine/step_stats.h"

namespace zeroshard::train {

struct RunInfo {
  int rank = 0, world = 1, stage = 0;
  bool offload_param = false;
  int64_t params = 0;  // Ψ
  int64_t steps = 0, micro_batch = 1, seq_len = 1, grad_accum = 1;
};

// {"event":"start", rank, world, stage, offload_param, params, steps,
//  micro_batch, seq_len, grad_accum}
std::string StartRecord(const RunInfo& info);

// {"event":"step", step, loss (global), rank_loss, lr, grad_norm, clip_coef,
//  loss_scale (of the step's gradients; 1 unless fp16), skipped, tokens,
//  step_seconds, tokens_per_s, bytes_moved (collective bytes sent + server
//  bytes pushed and gathered), collective_bytes, server_bytes,
//  model_state_bytes, param_bytes, grad_bytes, optimizer_bytes,
//  peak_live_param_bytes}
std::string StepRecord(const engine::StepStats& s);

// {"event":"end", eval_loss, eval_tokens}: the loss of the final
// parameters on a fixed batch (see zeroshard-worker).
std::string EndRecord(double eval_loss, int64_t eval_tokens);

// `v` as a JSON number, printf's %.<digits>g, or null when not finite.
std::string JsonDouble(double v, int digits);
// `v` as a JSON number, printf's %.<decimals>f, or null when not finite.
std::string JsonFixed(double v, int decimals);

// The "event" of a record ("" when absent).
std::string JsonEvent(absl::string_view line);
// The number (true = 1, false = 0) of field `key` in a record written above;
// nullopt when absent, null or not a number.
std::optional<double> JsonNumber(absl::string_view line, absl::string_view key);

}  // namespace zeroshard::train

#endif  // ZEROSHARD_WORKER_TRAIN_RUN_METRICS_H_
