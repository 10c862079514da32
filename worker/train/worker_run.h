// One zeroshard-worker run: a rank of a ZeRO training run of GPT-2
// (engine.h, trainer.h) over UCX between real processes and real shard
// servers, configured by a DeepSpeed JSON config (ds_options.h) and the
// shared training flags (train_flags.h).
//
// Rank, world and node layout come from the environment (rank_env.h: the
// launcher's ZEROSHARD_RANK, ZEROSHARD_WORLD_SIZE, ZEROSHARD_LOCAL_RANK,
// ZEROSHARD_LOCAL_SIZE, ZEROSHARD_COORD, or torchrun's and PyTorchJob's
// RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT),
// or from the membership with --elastic (elastic_worker.h); rank 0 may
// listen on port
// 0 and report the port through --port_file. Servers: --servers, else the
// config's zeroshard.servers addresses (stages 1-3).
//
// Rank 0 prints the config's warnings and one progress line per step:
//   step 3/100 loss 4.123456 lr 6.0e-04 norm 1.234 tokens/s 12345
// (--stats: every rank also prints its step_stats.h line). Rank 0 (at the
// end) writes the final parameters to --save. With --metrics_file every
// rank writes JSON lines (run_metrics.h, metrics_log.h) there: a "start"
// record, one "step" record per step and, on rank 0, "eval" records every
// --eval_every steps (on --val_data's held-out tokens, else the first
// batch of the training data; eval_loss.h) and an "end" record with the
// eval loss of the final parameters. A "%r" in the path is replaced by the rank
// (--elastic: the worker name). --metrics_port P (0: a free one) serves
// Prometheus metrics on --metrics_host:P (worker_metrics.h) while the rank
// trains and prints "rank R: metrics on http://HOST:PORT/metrics".
// The config's tensorboard / csv_monitor sections: rank 0 writes
// DeepSpeed's event and CSV files after every step (monitor_writers.h).
//
// Threading: RunWorker trains on the calling thread (and starts gRPC's,
// UCX's and the metrics server's threads).
#ifndef ZEROSHARD_WORKER_TRAIN_WORKER_RUN_H_
#define ZEROSHARD_WORKER_TRAIN_WORKER_RUN_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "common/fault/fault_spec.h"
#include "worker/engine/step_stats.h"
#include "worker/train/elastic_worker.h"
#include "worker/train/train_flags.h"

namespace zeroshard::train {

struct WorkerOptions {
  TrainFlags train;  // shared with `zeroshard train` (train_flags.h)
  // The worker's own (worker_cli.h).
  std::string servers;  // host:port,... (empty: the config's)
  std::string port_file, metrics_file;
  std::string metrics_host = "127.0.0.1";
  int64_t metrics_port = -1;  // -1: off
  bool stats = false;
  fault::FaultSpec faults;  // --fault_spec / ZEROSHARD_FAULTS
  ElasticFlags elastic;
};

// Where a build may hook into a run. The production zeroshard-worker
// installs none; test builds (zeroshard-worker-for-tests) install failure
// points here.
struct WorkerHooks {
  // After every step has been reported (progress line, metrics record),
  // on the training thread, with this worker's rank now.
  std::function<void(int rank, const engine::StepStats&)> after_step;
};

// Runs `o` to the end. OK also when an elastic worker left the job on a
// signal. Errors: the config's, the model's, the servers', the run's;
// INVALID_ARGUMENT for options that do not fit together (no servers for
// stages 1-3, --elastic at stage 0).
absl::Status RunWorker(const WorkerOptions& o, const WorkerHooks& hooks);

}  // namespace zeroshard::train

#endif  // ZEROSHARD_WORKER_TRAIN_WORKER_RUN_H_
