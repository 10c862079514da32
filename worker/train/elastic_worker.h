// zeroshard-worker --elastic (worker/elastic/elastic_trainer.h): no
// launcher environment; the worker joins the job's membership service on
// the first server as --worker_name (default host:pid), trains in whatever
// group the membership forms — at least --min_workers, the first group
// waits for --start_workers — and keeps the global batch of
// --start_workers × the config's gradient accumulation micro-batches
// (--batch_policy for sizes that do not divide it). Needs stage 1-3 and
// --checkpoint_interval > 0.
//
// SIGTERM or SIGINT (Kubernetes scaling the workers down) make an elastic
// worker leave the job cleanly once HandleStopSignals has run: it leaves
// the membership at once, trains on with its group until the group ends
// at a step boundary, prints
//   zeroshard-worker: NAME left the job after step N (SIGTERM)
// and its run ends without a result; the others go on without it. A
// second signal exits at once with 128 + its number.
//
// A permanent error (bad data, a bad config, a model that does not match
// the servers: worker/elastic/error_class.h) ends the job on every member:
// the worker that hits it fails the job through the membership and exits
// nonzero with the error; the others exit nonzero with
//   zeroshard-worker: FAILED_PRECONDITION: the job failed: worker 'W':
//   <the error>; not forming a new group
// Transient errors (a dead peer, an unreachable server) re-form the group.
// A worker that joins a job whose servers committed --steps already prints
//   zeroshard-worker: NAME: job 'J' already finished (the servers committed
//   step N of --steps N); nothing to do
// and its run ends without a result (exit 0).
#ifndef ZEROSHARD_WORKER_TRAIN_ELASTIC_WORKER_H_
#define ZEROSHARD_WORKER_TRAIN_ELASTIC_WORKER_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "client/shard_client.h"
#include "common/flags.h"
#include "worker/config/ds_config.h"
#include "worker/train/trainer.h"

namespace zeroshard::train {

struct ElasticFlags {
  bool elastic = false;
  std::string worker_name;  // empty: host:pid
  std::string batch_policy = "rescale";
  int64_t min_workers = 1, start_workers = 0;
  double elastic_timeout = 600, collective_timeout = 60;  // seconds
};

// Declares --elastic, --worker_name, --min_workers, --start_workers,
// --batch_policy, --elastic_timeout and --collective_timeout.
void AddElasticFlags(FlagSet* flags, ElasticFlags* f);

// The world size the DeepSpeed config is read for: --start_workers, else
// --min_workers.
int ElasticConfigWorld(const ElasticFlags& f);

// This worker's name in the membership: --worker_name, else host:pid.
std::string ElasticWorkerName(const ElasticFlags& f);

// Makes SIGTERM and SIGINT request the leave (file comment). Call it from
// main() before any thread starts: the signals are blocked in the calling
// thread and so in the threads started after it (gRPC's, UCX's), whose
// system calls they must not interrupt, and one thread started here takes
// them. Threads started before main (OpenBLAS's pool, by a library
// constructor) may take them too: the handler only touches an atomic.
void HandleStopSignals();

// Joins the membership of spec.zero.job_id through `client` (connected to
// the servers; not owned) and trains in its groups (elastic::RunElastic)
// until the run is done, or until a stop signal makes this worker leave:
// then it prints the line above and returns nullopt; nullopt too when the
// job was done before this worker trained (the line above). `on_step` and
// `progress` as RunTraining's. Errors: a bad elastic flag
// (INVALID_ARGUMENT naming it), the membership's, the run's (a permanent
// error: the job failed, this worker's or another member's).
absl::StatusOr<std::optional<TrainResult>> RunElasticWorker(
    const ElasticFlags& f, const config::EngineConfig& config,
    const TrainSpec& spec, ShardClient* client, const StepCallback& on_step,
    TrainProgress* progress);

}  // namespace zeroshard::train

#endif  // ZEROSHARD_WORKER_TRAIN_ELASTIC_WORKER_H_
