// The end-of-run report of `zeroshard train`, from the workers' JSON-lines
// records (worker/train/run_metrics.h, one file per rank):
//   metrics.jsonl  one line per step: step, loss, lr, grad_norm, loss_scale,
//                  tokens_per_s, bytes_moved (rank 0), and per worker
//                  model_state_bytes and bytes_moved (arrays in rank order);
//                  strict JSON: null for a value that is not finite or a
//                  rank without that step; "eval_loss" on the steps rank 0
//                  evaluated (worker/train/eval_loss.h)
//   loss.svg       the training loss with the eval points over it, and the
//                  learning rate in a panel below (a self-contained SVG)
//   report.md      the summary table, also returned for printing:
//                  tokens/s, model-state memory per worker against the
//                  stage-0 (DDP) figure of worker/engine/zero_theory.h, and
//                  communication per step against the DESIGN formula; then
//                  the run's context (RunContext: "stopped at step N of M"
//                  for a run cut short, the version and source revision,
//                  the command line, the resolved configuration).
//
// A run stopped early (Ctrl-C, SIGTERM) gets the same files up to the
// last step every rank file holds. A job continued from its checkpoints in
// the same directory keeps its history: the launcher moves each rank's
// records of the attempts before onto metrics-rank<r>.earlier.jsonl before
// it starts (KeepEarlierMetrics), and the report puts them in front of this
// run's when this run continues them (its first step is after step 1, the
// model the same size); a step run in two attempts counts as redone, as one
// redone after a restart within a run. Attempts before the last one that
// started at step 1 (a new job), of another model size, or without a step
// record are left out; an earlier file none of whose records is used is
// removed.
//
// Thread-compatible pure file work, through a Env (DefaultEnv()
// unless a test passes one); each output is replaced atomically.
#ifndef ZEROSHARD_LAUNCHER_REPORT_H_
#define ZEROSHARD_LAUNCHER_REPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/env/env.h"

namespace zeroshard {

struct LossPoint {
  double step = 0, loss = 0;
};

// An SVG line chart of `points` (step, loss) with axes and labels.
std::string LossCurveSvg(const std::vector<LossPoint>& points,
                         const std::string& title);

// The same with `eval` (step, eval loss) as marked points over the loss
// and, when `lr` has points, a second panel below with the learning rate
// (step, lr) on its own axis.
std::string TrainingCurvesSvg(const std::vector<LossPoint>& loss,
                              const std::vector<LossPoint>& eval,
                              const std::vector<LossPoint>& lr,
                              const std::string& title);

// What the launcher knows of a run that the metrics files do not say.
struct RunContext {
  std::string version;        // common/version.h's VersionLine
  std::string command_line;   // as typed, shell-quoted
  std::string config_table;   // markdown: the resolved configuration
  int64_t planned_steps = 0;  // M of "stopped at step N of M"
  std::string stopped_by;     // "": ran to the end; else e.g. "SIGTERM"
};

// Reads `dir`/metrics-rank<r>.jsonl for r in [0, world), writes the three
// files above into `dir` and returns the summary table (markdown).
// NOT_FOUND / DATA_LOSS naming a missing or unreadable rank file (one
// without a step record: a run stopped before its first step), the Env's
// error naming an output that cannot be written.
absl::StatusOr<std::string> WriteRunReport(const std::string& dir, int world,
                                           const RunContext& context,
                                           Env* env = DefaultEnv());
absl::StatusOr<std::string> WriteRunReport(const std::string& dir, int world,
                                           Env* env = DefaultEnv());

// Moves `dir`/metrics-rank<rank>.jsonl, if there, onto the end of
// EarlierMetricsPath(dir, rank) (created if missing). The Env's error
// naming the path when it cannot.
absl::Status KeepEarlierMetrics(const std::string& dir, int rank,
                                Env* env = DefaultEnv());
std::string EarlierMetricsPath(const std::string& dir, int rank);

}  // namespace zeroshard

#endif  // ZEROSHARD_LAUNCHER_REPORT_H_
