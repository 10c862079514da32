// The launcher's progress display for one job.
//
// On a terminal: one live line, redrawn in place at every step
//   step 120/700  loss 2.4312  14.2k tok/s  ETA 0:52  server step 120
// Elsewhere (a pipe, a CI log): the same text as a plain line every
// `print_every` steps and at the last step. Other output (workers' log
// lines) goes through Print(), which keeps the live line below it.
//
// Threading: one thread.
#ifndef ZEROSHARD_LAUNCHER_PROGRESS_H_
#define ZEROSHARD_LAUNCHER_PROGRESS_H_

#include <cstdint>
#include <cstdio>
#include <string>

namespace zeroshard {

struct ProgressPoint {
  int64_t step = 0;
  double loss = 0;
  double tokens_per_s = 0;   // mean over the steps so far
  double eta_seconds = -1;   // < 0: unknown
  int64_t server_step = -1;  // < 0: no servers
};

// "step 120/700  loss 2.4312  14.2k tok/s  ETA 0:52  server step 120".
std::string FormatProgress(const ProgressPoint& p, int64_t total_steps);

class Progress {
 public:
  // `out` is not owned. print_every <= 0 means about 20 lines per run.
  Progress(FILE* out, bool live, int64_t total_steps, int64_t print_every);

  void Update(const ProgressPoint& p);
  // Whether Update(step) would write a line that stays: a plain line, or
  // the last step's.
  bool Keeps(int64_t step) const;
  // Prints one line of other output.
  void Print(const std::string& line);
  // Ends the live line (a newline) so that later output starts clean.
  void Finish();

 private:
  void Clear();

  FILE* out_;
  bool live_;
  int64_t total_, every_;
  std::string line_;  // the live line shown now ("" when none)
  int64_t last_printed_ = 0;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_LAUNCHER_PROGRESS_H_
