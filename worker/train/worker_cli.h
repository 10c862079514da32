// zeroshard-worker's command line: one rank of a ZeRO run of GPT-2
// (worker_run.h), or with --elastic a member of an elastic job
// (elastic_worker.h).
//
//   zeroshard-worker --config ds_config.json --data 'train_*.bin'
//       --model_file init.bin --seq_len 64 --steps 100 --save final.bin
//       --servers host:port,host:port
//
// Flags: the training options shared with `zeroshard train`
// (train_flags.h), then the worker's own: --servers, --port_file, --stats,
// --fault_spec (else $ZEROSHARD_FAULTS), --metrics_file, --metrics_host,
// --metrics_port and the elastic ones.
#ifndef ZEROSHARD_WORKER_TRAIN_WORKER_CLI_H_
#define ZEROSHARD_WORKER_TRAIN_WORKER_CLI_H_

#include "worker/train/worker_run.h"

namespace zeroshard::train {

// main() of a worker binary that installs `hooks` (worker_run.h). Call from
// main() before any thread starts. Returns the exit code: 0 on success
// (and after an elastic worker left the job), 1 or 3 with the error on
// stderr when the run fails (3: a restart would meet the same error,
// elastic::WorkerExitCode); --help exits 0 and a bad flag exits 2 with
// one line naming it, here.
int WorkerMain(int argc, char** argv, const WorkerHooks& hooks);

}  // namespace zeroshard::train

#endif  // ZEROSHARD_WORKER_TRAIN_WORKER_CLI_H_
