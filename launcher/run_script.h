// `zeroshard run`: a user's training program (a PyTorch script calling
// zeroshard.initialize, or any program embedding the C API) on W ranks of
// this machine, with shard servers started for it — DeepSpeed's
// `deepspeed train.py` launcher for zeroshard.
//
//   zeroshard run [--workers=W] [--servers=K | --server_addrs=H:P,...]
//       [--checkpoint_dir=DIR] [--work_dir=DIR] [--job_id=ID] [--]
//       PROGRAM [ARGS...]
//
// Starts K zeroshard-server processes on loopback (fleet/local_fleet.h;
// none with --server_addrs), then W copies of PROGRAM with torchrun's
// environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR=127.0.0.1, MASTER_PORT) and zeroshard's (ZEROSHARD_SERVERS,
// ZEROSHARD_JOB_ID with --job_id, ZEROSHARD_LIB when it is not set and
// libzeroshard.so lies beside the launcher). A PROGRAM ending in ".py" runs
// under --python -u (python3); one without '/' is looked up in PATH. Each rank
// writes to <work_dir>/rank-<r>.log, echoed here with "[rank r] " (nothing
// before the lines of a single rank).
//
// Failure handling is `zeroshard train`'s (train.h): a rank that exits
// non-zero stops the others (SIGTERM, SIGKILL after a grace period); with
// --max_restarts=N all ranks start again, up to N times (the program
// continues as it would when started again: with recovery on, from the
// servers' state; each attempt's logs kept as rank-<r>.attempt-<k>.log),
// else the launcher exits 1 naming it and the end of its log; a server that
// exits is restarted from its newest checkpoint with --checkpoint_dir (the
// ranks roll back), else stops the job; SIGINT/SIGTERM stop everything (exit
// 128 + signal). Children get SIGTERM if the launcher dies.
#ifndef ZEROSHARD_LAUNCHER_RUN_SCRIPT_H_
#define ZEROSHARD_LAUNCHER_RUN_SCRIPT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace zeroshard {

struct RunOptions {
  uint32_t workers = 1;
  uint32_t servers = 2;  // started here; 0 with server_addrs
  std::string server_addrs;
  uint32_t server_threads = 0;  // 0: the cores shared out (train's rule)
  std::string checkpoint_dir;
  std::string work_dir = "/tmp/zeroshard-run";
  std::string job_id;
  // A rank that fails stops the others and all start again, this many
  // times at most (torchrun's --max_restarts; 0: the job stops).
  uint32_t max_restarts = 0;
  std::string python = "python3";    // what runs a .py PROGRAM
  std::vector<std::string> program;  // PROGRAM ARGS...
};

// Parses argv[2..] (argv[1] is "run"): the launcher's flags up to "--" or
// the first argument that is not one of them, then the program and its
// arguments, untouched. INVALID_ARGUMENT naming the problem.
absl::StatusOr<RunOptions> ParseRunOptions(int argc, char** argv);

// The program's argv: a ".py" file under `python` -u, a bare name looked
// up in `path` (PATH's value). NOT_FOUND naming where it looked.
absl::StatusOr<std::vector<std::string>> ResolveProgram(
    const std::vector<std::string>& program, const std::string& python,
    const std::string& path);

// argv[1] is "run". Exit codes: the job's (0 when every rank exited 0, 1
// when one failed or a server could not run), 2 a bad command line (nothing
// started), 128 + signal after SIGINT/SIGTERM.
int RunScript(int argc, char** argv);

}  // namespace zeroshard

#endif  // ZEROSHARD_LAUNCHER_RUN_SCRIPT_H_
