// The end-of-run report of `zeroshard train`, from the workers' JSON-lines
// records (worker/train/run_metrics.h, one file per rank):
//   metrics.jsonl  one line per step: step, loss, lr, grad_norm, loss_scale,
//                  tokens_per_s, bytes_moved (rank 0), and per worker
//                  model_state_bytes and bytes_moved (arrays in rank order);
//                  strict JSON: null for a value that is not finite or a
//                  rank without that step
//   loss.svg       the loss curve (a self-contained SVG)
//   report.md      the summary table, also returned for printing:
//                  tokens/s, model-state memory per worker against the
//                  stage-0 (DDP) figure of worker/engine/zero_theory.h, and
//                  communication per step against the DESIGN formula.
//
// Thread-compatible pure file work, through a Env (DefaultEnv()
// unless a test passes one); each output is replaced atomically.
#ifndef ZEROSHARD_LAUNCHER_REPORT_H_
#define ZEROSHARD_LAUNCHER_REPORT_H_

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

// Reads `dir`/metrics-rank<r>.jsonl for r in [0, world), writes the three
// files above into `dir` and returns the summary table (markdown).
// NOT_FOUND / DATA_LOSS naming a missing or unreadable rank file, the Env's
// error naming an output that cannot be written.
absl::StatusOr<std::string> WriteRunReport(const std::string& dir, int world,
                                           Env* env = DefaultEnv());

}  // namespace zeroshard

#endif  // ZEROSHARD_LAUNCHER_REPORT_H_
