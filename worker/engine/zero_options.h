// ZeroOptions: what the ZeRO engine (engine.h) needs to know about a run.
// A plain value type; ds_options.h maps a DeepSpeed JSON config
// (worker/config/ds_config.h) onto it.
#ifndef ZEROSHARD_WORKER_ENGINE_ZERO_OPTIONS_H_
#define ZEROSHARD_WORKER_ENGINE_ZERO_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "worker/engine/loss_scaler.h"
#include "worker/engine/lr_schedule.h"
#include "worker/engine/precision.h"

namespace zeroshard::engine {

struct ZeroOptions {
  // 0: DDP (all-reduce, local AdamW, no servers); 1: optimizer states on
  // the servers; 2: + gradients partitioned; 3: + parameters partitioned.
  int stage = 0;
  int micro_batch = 1;  // B
  int seq_len = 1;      // T
  int gradient_accumulation_steps = 1;
  // Global gradient-norm clipping (torch clip_grad_norm_); <= 0: off.
  double gradient_clipping = 0;
  // Learning rate of update k (0-based; updates skipped for non-finite
  // gradients do not count): engine::UpdateLearningRate(lr_schedule, k).
  // kConstant (the default): lr_schedule.lr throughout.
  engine::LrSchedule lr_schedule;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  bool bias_correction = true;  // false: DeepSpeed's Adam option (adamw.h)
  double weight_decay = 0;      // on matrices (parameter group 0) only
  // fp16 / bf16: the model reads the master weights rounded to the type,
  // and each micro-batch's gradient, times the loss scale, is rounded to it
  // (worker/engine/precision.h); the master weights, gradient accumulation,
  // reduction and optimizer stay fp32. fp16 scales the loss by
  // `loss_scaler` (static or dynamic with hysteresis; every rank keeps an
  // identical scaler, updated from the step decision they share); bf16 and
  // fp32 use scale 1 (loss_scaler is ignored).
  engine::Precision precision = engine::Precision::kFp32;
  engine::LossScalerOptions loss_scaler;
  // Elements per gradient bucket; rounded up to a multiple of the
  // communicator's part alignment. Bucket boundaries depend only on this
  // and the layout (zero_plan.h), never on the stage or the server count.
  // One rank with servers has nothing to reduce and pushes in buckets of
  // at most 16M elements (GradReducer::kOneRankBucket).
  uint64_t reduce_bucket_size = 500'000'000;
  // Stages 1-2 without recovery: elements per parameter all-gather after
  // a step, as runs of whole units (zero_plan.h GatherBuckets; DeepSpeed's
  // allgather_bucket_size). Each bucket is one server gather per rank and
  // one all-gather; the next forward waits for a unit's bucket when it
  // first needs the unit. 0: one bucket per unit.
  uint64_t allgather_bucket_size = 500'000'000;
  // Stage 3: parameter units (embeddings, blocks, final norm) gathered
  // ahead of their use.
  int stage3_prefetch_units = 1;
  // Stage 3: a parameter unit of at most this many elements is persistent:
  // every rank keeps it whole, fetched from the servers after each commit,
  // and never gathers or releases it (param_window.h). 0: none.
  uint64_t stage3_param_persistence_threshold = 0;
  // Stage 3: a unit released while its next need is fewer than this many
  // elements ahead in the need schedule (the units needed in between,
  // counted as DeepSpeed's stage3_max_reuse_distance counts them) stays
  // live for it: with DeepSpeed's default of 1e9 a model's units are
  // gathered once per micro-batch, not again for backward. 0: only the
  // next two needs (param_window.h).
  uint64_t stage3_max_reuse_distance = 0;
  // Stage 3 with the model on a device: the most parameters it keeps in
  // device memory (DeepSpeed's stage3_max_live_parameters; GPT-2 keeps its
  // embeddings and final norm and at least two blocks whatever this says:
  // worker/gpt2/device_model.h; 0 keeps just those).
  uint64_t stage3_max_live_parameters = 1'000'000'000;
  // Stage 3: keep no parameter partition on the worker; fetch each unit
  // from the shard servers (one slice per rank, then all-gathered).
  bool offload_param_server = false;
  // Reduce buckets while backward continues (async collectives issued from
  // the gradient hook); false: reduce after backward, one bucket at a time.
  bool overlap_comm = true;
  // Stages 1-3: workers do not reduce gradients among themselves; each
  // rank pushes every micro-batch's gradient buckets (scaled by 1/(W·gas))
  // to the servers as contribution micro·W + rank, and the servers sum the
  // W·gas contributions in that order. The gradient norm, clip coefficient
  // and skip then come from the servers' prepare (zeroshard.
  // server_aggregation).
  bool server_aggregation = false;
  // Stage 3: fill released parameter ranges with NaN so that a use after
  // release shows up in the loss (the CPU model keeps a full-size buffer).
  bool poison_released_params = true;
  // CPU kernel threads of the model.
  int threads = 1;
  // Servers: the job id of the registered ModelSpec.
  std::string job_id = "zero";
  // Recorded with the workers' state from the first checkpoint on (a
  // resumed job compares them: worker/train/run_changes.h): the run's seed
  // and its data files (run_changes.h DataRecord; "" synthetic tokens).
  uint64_t seed = 0;
  std::string data;
  // Stages 1-3: checkpoint every this many steps (0: never; the servers
  // need --checkpoint_dir). Turns on recovery: the job starts from the
  // newest checkpoint the servers hold, and a step failed because a server
  // restarted (or committed on some servers only) rolls every rank back to
  // the newest checkpoint and continues.
  int checkpoint_interval = 0;
  // How long the leader waits for restarting servers to answer.
  double recovery_timeout_seconds = 120;
  // ZeRO-Offload's one-step delayed parameter update, from step N = this
  // on (0: off). Stages 1-2 without recovery (no checkpoints, not elastic)
  // and without server_aggregation. Steps 0..N-1 train as usual; step s >= N
  // computes its gradients on the parameters before step s-1's update,
  // which is committed on the servers, fetched and all-gathered while step
  // s runs (engine.h). Changes the arithmetic: the update of step s is
  // AdamW of the current parameters with a gradient one update old.
  int64_t delayed_update_from = 0;
};

// INVALID_ARGUMENT naming the first bad field.
absl::Status ValidateZeroOptions(const ZeroOptions& options);

}  // namespace zeroshard::engine

#endif  // ZEROSHARD_WORKER_ENGINE_ZERO_OPTIONS_H_
