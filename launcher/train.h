// `zeroshard train`: one ZeRO training job of GPT-2 on this machine.
//
// Starts K shard servers on loopback (fleet/local_fleet.h) unless the
// options name running ones, then W zeroshard-worker processes with
// ZEROSHARD_RANK / _WORLD_SIZE / _LOCAL_RANK / _LOCAL_SIZE / _COORD in
// their environment (rank 0 first: its UCX port is every other rank's
// rendezvous). Each worker logs to <work_dir>/rank-<r>.log; the launcher
// echoes new log lines prefixed "[rank r] " (rank 0's per-step lines are
// shown as the progress line instead, progress.h) and reads rank 0's
// metrics records for progress. At the end it writes the report
// (report.h) into <work_dir> and prints its summary.
//
// Failure handling: a worker that exits non-zero, or a server that exits
// at all, stops the job: every other process gets SIGTERM (then SIGKILL
// after a grace period) and the launcher exits 1 with "worker rank R (pid
// P) failed with exit code N" and the end of its log. When peers fail too
// (UNAVAILABLE: the rank is unreachable), the one whose log does not end
// in that error is named first. SIGINT/SIGTERM to the launcher stop every
// process the same way (exit 128 + signal). Either way the launcher still
// writes the report up to the last step every rank recorded ("stopped at
// step N of M by SIGTERM" / "by a failure (worker rank R ...)").
// report.md also records the version and source revision, the command
// line and the resolved configuration. Children also get SIGTERM if the
// launcher dies (common/subprocess.h), so no process outlives it.
#ifndef ZEROSHARD_LAUNCHER_TRAIN_H_
#define ZEROSHARD_LAUNCHER_TRAIN_H_

namespace zeroshard {

// argv[1] is "train". Exit codes: 0 success; 1 the job failed; 2 a bad
// command line, data file, model file or config (nothing started);
// 128 + signal after SIGINT/SIGTERM.
int RunTrain(int argc, char** argv);

}  // namespace zeroshard

#endif  // ZEROSHARD_LAUNCHER_TRAIN_H_
