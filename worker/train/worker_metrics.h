// A training worker's Prometheus metrics (zeroshard-worker
// --metrics_port), updated from each step's StepStats:
//   zeroshard_worker_info{rank,world,stage} 1
//   zeroshard_worker_step, zeroshard_worker_target_steps
//   zeroshard_worker_steps_total (counter: rate() is steps per second)
//   zeroshard_worker_loss (global mean), zeroshard_worker_rank_loss
//   zeroshard_worker_learning_rate, zeroshard_worker_grad_norm
//   zeroshard_worker_skipped_steps_total
//   zeroshard_worker_tokens_total (all ranks' tokens, as the step reports
//       them; rate() is the throughput), zeroshard_worker_tokens_per_second
//       (the last step's: kept for dashboards that read it)
//   zeroshard_worker_step_duration_seconds{phase="step|compute|comm_wait|
//       server_wait"} (histogram of every step: quantiles, and rate(_sum) /
//       rate(_count) the mean), zeroshard_worker_step_seconds{phase} (the
//       last step's, a gauge: kept for dashboards that read it)
//   zeroshard_worker_sent_bytes_total{peer="collective|server"},
//   zeroshard_worker_received_bytes_total{peer="collective|server"}
//   zeroshard_worker_model_state_bytes{kind="param|grad|optimizer"},
//   zeroshard_worker_peak_live_param_bytes
// Thread-safe (the registry's children are).
#ifndef ZEROSHARD_WORKER_TRAIN_WORKER_METRICS_H_
#define ZEROSHARD_WORKER_TRAIN_WORKER_METRICS_H_

#include "common/metrics/registry.h"
#include "worker/engine/step_stats.h"

namespace zeroshard::train {

class WorkerMetrics {
 public:
  // Registers the metrics in `registry`, which must outlive this object.
  WorkerMetrics(metrics::Registry* registry, int rank, int world, int stage,
                int64_t target_steps);
  void OnStep(const engine::StepStats& s);

 private:
  metrics::Gauge *step_, *loss_, *rank_loss_, *lr_, *grad_norm_;
  metrics::Gauge *tokens_per_s_, *peak_live_;
  metrics::Counter *skipped_, *tokens_, *steps_total_;
  metrics::Gauge* seconds_[4];        // step, compute, comm_wait, server_wait
  metrics::Histogram* durations_[4];  // the same phases
  metrics::Gauge* state_bytes_[3];    // param, grad, optimizer
  metrics::Counter *sent_[2], *received_[2];  // collective, server
};

}  // namespace zeroshard::train

#endif  // ZEROSHARD_WORKER_TRAIN_WORKER_METRICS_H_
