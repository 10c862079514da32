// `zeroshard smoke`: starts real zeroshard-server processes on loopback and
// real zeroshard-worker processes that train the smoke task (AdamW on a
// quadratic, worker/quadratic.h) through them, prints progress from the
// servers' step counter and the loss before and after, and checks that the
// loss fell. Logs go to --work_dir. SIGINT/SIGTERM stop every process it
// started; a worker that fails stops the job, naming its rank and status.
#ifndef ZEROSHARD_LAUNCHER_SMOKE_H_
#define ZEROSHARD_LAUNCHER_SMOKE_H_

namespace zeroshard {

// argv[1] is "smoke". Exit codes: 0 success, 1 the job failed, 2 bad
// command line (exits directly).
int RunSmoke(int argc, char** argv);

}  // namespace zeroshard

#endif  // ZEROSHARD_LAUNCHER_SMOKE_H_
