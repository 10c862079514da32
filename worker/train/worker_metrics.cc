#include "worker/train/worker_metrics.h"

#include <string>
#include <vector>

namespace zeroshard::train {
namespace {

// Step and phase durations in seconds: 1 ms to 100 s, 1-2.5-5 per decade.
std::vector<double> StepBounds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
          0.5,   1,      2.5,   5,    10,    25,   50,  100};
}

}  // namespace

WorkerMetrics::WorkerMetrics(metrics::Registry* registry, int rank, int world,
                             int stage, int64_t target_steps) {
  metrics::Registry& r = *registry;
  r.GetGauge("zeroshard_worker_info", "This training worker: labels only.",
             {{"rank", std::to_string(rank)},
              {"world", std::to_string(world)},
              {"stage", std::to_string(stage)}})
      ->Set(1);
  r.GetGauge("zeroshard_worker_target_steps", "Optimizer steps of the run.")
      ->Set(static_cast<double>(target_steps));
  step_ = r.GetGauge("zeroshard_worker_step", "Optimizer steps completed.");
  steps_total_ = r.GetCounter(
      "zeroshard_worker_steps_total",
      "Optimizer steps run by this process (skipped ones included).");
  loss_ = r.GetGauge("zeroshard_worker_loss",
                     "Training loss of the last step (mean over all ranks).");
  rank_loss_ = r.GetGauge("zeroshard_worker_rank_loss",
                          "Training loss of the last step on this rank.");
  lr_ = r.GetGauge("zeroshard_worker_learning_rate",
                   "Learning rate of the last update (0 when skipped).");
  grad_norm_ = r.GetGauge("zeroshard_worker_grad_norm",
                          "Global gradient norm of the last step.");
  skipped_ = r.GetCounter("zeroshard_worker_skipped_steps_total",
                          "Steps skipped for non-finite gradients.");
  tokens_ = r.GetCounter("zeroshard_worker_tokens_total",
                         "Tokens trained on, all ranks.");
  tokens_per_s_ = r.GetGauge("zeroshard_worker_tokens_per_second",
                             "Tokens per second of the last step, all ranks.");
  const char* kPhases[] = {"step", "compute", "comm_wait", "server_wait"};
  for (int i = 0; i < 4; ++i) {
    seconds_[i] = r.GetGauge("zeroshard_worker_step_seconds",
                             "Seconds of the last step, by phase (see "
                             "zeroshard_worker_step_duration_seconds).",
                             {{"phase", kPhases[i]}});
    durations_[i] = r.GetHistogram("zeroshard_worker_step_duration_seconds",
                                   "Seconds of every step, by phase.",
                                   StepBounds(), {{"phase", kPhases[i]}});
  }
  const char* kPeers[] = {"collective", "server"};
  for (int i = 0; i < 2; ++i) {
    sent_[i] =
        r.GetCounter("zeroshard_worker_sent_bytes_total",
                     "Payload bytes sent, by peer.", {{"peer", kPeers[i]}});
    received_[i] =
        r.GetCounter("zeroshard_worker_received_bytes_total",
                     "Payload bytes received, by peer.", {{"peer", kPeers[i]}});
  }
  const char* kKinds[] = {"param", "grad", "optimizer"};
  for (int i = 0; i < 3; ++i) {
    state_bytes_[i] =
        r.GetGauge("zeroshard_worker_model_state_bytes",
                   "Model-state bytes held by this worker, by kind.",
                   {{"kind", kKinds[i]}});
  }
  peak_live_ = r.GetGauge(
      "zeroshard_worker_peak_live_param_bytes",
      "Stage 3: most bytes of gathered parameters at once in the last step.");
}

void WorkerMetrics::OnStep(const engine::StepStats& s) {
  step_->Set(static_cast<double>(s.step));
  loss_->Set(s.global_loss);
  rank_loss_->Set(s.loss);
  lr_->Set(s.lr);
  grad_norm_->Set(s.grad_norm);
  if (s.skipped) skipped_->Add(1);
  tokens_->Add(static_cast<double>(s.tokens));
  tokens_per_s_->Set(s.step_seconds > 0 ? s.tokens / s.step_seconds : 0);
  const double seconds[] = {s.step_seconds, s.compute_seconds,
                            s.comm_wait_seconds, s.server_wait_seconds};
  for (int i = 0; i < 4; ++i) {
    seconds_[i]->Set(seconds[i]);
    durations_[i]->Observe(seconds[i]);
  }
  steps_total_->Add(1);
  const engine::Traffic* collectives[] = {&s.all_reduce, &s.reduce_scatter,
                                          &s.all_gather, &s.broadcast};
  const engine::Traffic* server[] = {&s.server_push, &s.server_gather,
                                     &s.server_control};
  for (const engine::Traffic* t : collectives) {
    sent_[0]->Add(static_cast<double>(t->bytes_sent));
    received_[0]->Add(static_cast<double>(t->bytes_received));
  }
  for (const engine::Traffic* t : server) {
    sent_[1]->Add(static_cast<double>(t->bytes_sent));
    received_[1]->Add(static_cast<double>(t->bytes_received));
  }
  const uint64_t state[] = {s.param_bytes, s.grad_bytes, s.optimizer_bytes};
  for (int i = 0; i < 3; ++i) {
    state_bytes_[i]->Set(static_cast<double>(state[i]));
  }
  peak_live_->Set(static_cast<double>(s.peak_live_param_bytes));
}

}  // namespace zeroshard::train
