// The engine's configuration: the part of DeepSpeed's JSON config
// (https://www.deepspeed.ai/docs/config-json/) that zeroshard implements,
// with DeepSpeed's defaults and rules, plus a `zeroshard` section.
//
//   {
//     "train_batch_size": 32,                  // any two of these three
//     "train_micro_batch_size_per_gpu": 4,     // determine the third:
//     "gradient_accumulation_steps": 2,        // train = micro * gas * world
//     "gradient_clipping": 1.0,                // global L2 norm; 0 = off
//     "optimizer": {"type": "AdamW", "params": {"lr": 3e-4,
//         "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}},
//     "scheduler": {"type": "WarmupCosineLR", "params": {...}},
//     "bf16": {"enabled": true},               // or "fp16": {...}
//     "zero_optimization": {"stage": 3, "offload_param": {"device": "server"}},
//     "zeroshard": {"servers": ["10.0.0.1:7000", "10.0.0.2:7000"],
//                   "server_aggregation": false, "alignment": 64}
//   }
//
// Rules (DeepSpeed's unless said otherwise):
// - Batch sizes resolve as DeepSpeed's _configure_train_batch_size (see
//   ResolveBatchSizes): train_batch_size = micro * gas * world_size; any two
//   determine the third; train alone means gas 1; micro alone means gas 1;
//   all three must agree; a derived value must divide exactly.
// - optimizer.type is "Adam" or "AdamW" (any case). Like DeepSpeed, "Adam"
//   means AdamW (decoupled weight decay) unless params.adam_w_mode is false;
//   Adam with L2-coupled weight decay (adam_w_mode false, weight_decay > 0)
//   is an error, since the shard servers run AdamW only. Defaults: lr 1e-3,
//   betas [0.9, 0.999], eps 1e-8, weight_decay 0 (DeepSpeed's FusedAdam).
//   bias_correction false (BERT configs) drops the 1 - beta^t terms, as
//   DeepSpeed's Adam does; amsgrad true is an error.
// - scheduler.type: WarmupLR, WarmupDecayLR, WarmupCosineLR (see
//   lr_schedule.h); total_num_steps is required by the last two; without a
//   scheduler the rate is optimizer.params.lr throughout.
// - fp16: loss_scale 0 = dynamic (initial 2^initial_scale_power, default
//   16; loss_scale_window 1000; hysteresis 2; consecutive_hysteresis false;
//   min_loss_scale 1), > 0 = static: current DeepSpeed's defaults
//   (DeepSpeedFP16Config applies them whether or not the section names any
//   scaler key; older releases then fell back to DynamicLossScaler's own,
//   2^32 and hysteresis 1). bf16 ("bfloat16" is an alias) has no loss
//   scaling.
//   fp16 and bf16 both enabled is an error.
// - zero_optimization: stage 0–3 (anything else is an error); overlap_comm
//   defaults to (stage == 3); contiguous_gradients and reduce_scatter true;
//   reduce_bucket_size and allgather_bucket_size 5e8,
//   stage3_prefetch_bucket_size 5e7, stage3_max_live_parameters 1e9,
//   stage3_max_reuse_distance 1e9, stage3_param_persistence_threshold 1e5,
//   sub_group_size 1e9 (elements; non-negative integers). Each stage3_*
//   key may also be written under DeepSpeedZeroConfig's field name
//   (max_reuse_distance for stage3_max_reuse_distance, ...), as DeepSpeed
//   takes it; both names with different values are an error.
//   offload_param.device: "none" or "server" ("cpu" is read as "server",
//   with a warning; "nvme" means "server" with the servers' NVMe tier);
//   "server" requires stage 3. offload_optimizer.device "cpu" or "none" is
//   ignored with a warning (optimizer state always lives on the shard
//   servers); "nvme" puts that state on the servers' NVMe tier.
// - NVMe ("device": "nvme" in either offload section, with its nvme_path,
//   and the top-level "aio" section: block_size, queue_depth, thread_count
//   or intra_op_parallelism; single_submit and overlap_events are not used)
//   becomes NvmeConfig: the zeroshard-server flags --storage=nvme
//   --nvme_path --aio_block_size --aio_queue_depth
//   --aio_intra_op_parallelism (NvmeServerFlags). zeroshard train passes
//   them to the servers it starts; otherwise the parser's warning names
//   them (NvmeAdvice). nvme_path is required; two different paths are an
//   error.
// - zeroshard (this project's section):
//     servers: an array of distinct "host:port" strings (an existing fleet),
//              or a positive count K (the launcher starts K servers on this
//              machine). Absent: num_servers 0, the launcher decides.
//     server_aggregation: false (default): workers reduce gradients among
//              themselves and each range is pushed once per step; true: each
//              worker pushes its partial gradient and the server sums them
//              (ModelSpec.contributions_per_step = world size).
//     alignment: partition-range alignment in elements (default 64).
//     checkpoint_interval: the servers checkpoint every this many steps
//              (0, the default: never); needs servers started with
//              --checkpoint_dir (zeroshard train --checkpoint-dir). Turns on
//              recovery: resume from the newest checkpoint, roll back when a
//              server restarts.
//     device: where the workers' model computes: "cpu" (the default),
//              "cuda" (the GPU; docs/cuda.md) or "host-emulated" (the GPU
//              path on host memory, for tests); zeroshard train --device
//              overrides it.
//     delayed_parameter_update: false (default); true: ZeRO-Offload's
//              one-step delayed parameter update from step
//              delayed_update_warmup_steps (>= 1, default 40) on — changes
//              the arithmetic (engine.h, docs/training.md). Stages 1-2
//              without checkpoint_interval or server_aggregation
//              (ds_options.h refuses the rest by name).
// - torch_autocast: {"enabled", "dtype" ("bfloat16", the default, or
//   "bf16"; float16 is an error: it needs torch's GradScaler), and
//   "lower_precision_safe_modules" (not used: gradients travel in the
//   parameters' fp32)}; enabled with fp16 or bf16 enabled is an error.
//   Python's engine runs the module's forward under torch.autocast;
//   zeroshard train refuses it (ds_options.h).
// - gradient_allreduce_op: "mean" only (any case; "sum" is an error);
//   dataloader_drop_last: a bool, used by Python's deepspeed_io.
// - tensorboard, csv_monitor, wandb, comet: DeepSpeed's monitor sections
//   (monitor_config.h).
// - Numbers: integers may be written as floats when integral (5e8); a
//   non-integral, negative (where sizes are meant) or wrongly typed value is
//   an error naming its full path: "zero_optimization.reduce_bucket_size:
//   must be a non-negative integer, got -1".
// - null means "not given". "auto" (as written by Hugging Face's Trainer)
//   is filled from AutoInputs (auto_inputs.h: the command line and the
//   model); an "auto" nothing fills is an error naming the key and the
//   flag that would. Their paths are listed in EngineConfig::auto_keys;
//   every key's value and source in EngineConfig::resolved.
// - With AutoInputs::steps known, a WarmupDecayLR/WarmupCosineLR
//   total_num_steps written in the file that differs from it draws a
//   warning.
// - JSON is read as Python's json.load reads it (json_parse.h).
// - Unknown keys at any level: a warning "unknown key <path> ignored";
//   a near miss of a known key is an error "unknown key zero_optimisation
//   (did you mean zero_optimization?)".
//   DeepSpeed keys that zeroshard has no use for (steps_per_print,
//   round_robin_gradients, ...): a warning "<path>: not used by zeroshard
//   (<why>); ignored". Duplicate keys are an error.
//
// All errors are INVALID_ARGUMENT (NOT_FOUND for a file that cannot be
// opened, DATA_LOSS for a read error). Pure functions on value types;
// thread-safe.
#ifndef ZEROSHARD_WORKER_CONFIG_DS_CONFIG_H_
#define ZEROSHARD_WORKER_CONFIG_DS_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/env/env.h"
#include "worker/config/auto_inputs.h"
#include "worker/config/monitor_config.h"
#include "worker/config/resolved_table.h"
#include "worker/engine/loss_scaler.h"
#include "worker/engine/lr_schedule.h"
#include "worker/engine/precision.h"

namespace zeroshard::config {

struct BatchSizes {
  int64_t train_batch_size = 0;  // samples per optimizer step, all workers
  int64_t micro_batch_per_worker = 0;  // train_micro_batch_size_per_gpu
  int64_t gradient_accumulation_steps = 0;
  int world_size = 0;  // data-parallel workers
};

// DeepSpeed's _configure_train_batch_size; -1 means "not given". Errors
// name the keys and numbers: "train_batch_size (32) must equal
// train_micro_batch_size_per_gpu (4) * gradient_accumulation_steps (2) *
// world size (2) = 16". Also the rule for re-resolving after the world size
// changes.
absl::StatusOr<BatchSizes> ResolveBatchSizes(
    int64_t train_batch_size, int64_t micro_batch_per_worker,
    int64_t gradient_accumulation_steps, int world_size);

struct AdamWConfig {
  std::string type = "AdamW";  // as written: Adam or AdamW, any case
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;    // decoupled (AdamW)
  bool bias_correction = true;  // false: no 1 - beta^t terms (DeepSpeed)
};

enum class OffloadDevice { kNone, kServer };

// The servers' NVMe tier, asked for by an offload section's "nvme".
struct NvmeConfig {
  bool enabled = false;
  std::string nvme_path;
  std::string requested_by;  // "zero_optimization.offload_optimizer.device"
  // From the aio section; -1: not given (the server's default).
  int64_t block_size = -1, queue_depth = -1, intra_op_parallelism = -1;
};

struct ZeroConfig {
  int stage = 0;
  bool overlap_comm = false;
  bool contiguous_gradients = true;
  bool reduce_scatter = true;
  int64_t reduce_bucket_size = 500000000;  // elements
  int64_t allgather_bucket_size = 500000000;
  int64_t stage3_prefetch_bucket_size = 50000000;
  int64_t stage3_max_live_parameters = 1000000000;
  int64_t stage3_max_reuse_distance = 1000000000;
  int64_t stage3_param_persistence_threshold = 100000;
  int64_t sub_group_size = 1000000000;
  OffloadDevice offload_param = OffloadDevice::kNone;
  NvmeConfig nvme;
};

struct ZeroShardConfig {
  std::vector<std::string> server_addresses;  // "host:port"; may be empty
  int num_servers = 0;  // addresses.size(), the count given, or 0 (unset)
  bool server_aggregation = false;
  uint32_t alignment = 64;
  int checkpoint_interval = 0;  // steps; 0 = no checkpoints
  std::string device = "cpu";   // "cpu", "cuda" or "host-emulated"
  // ZeRO-Offload's one-step delayed parameter update (stages 1-2, no
  // checkpoints, no server aggregation): from step
  // delayed_update_warmup_steps on (engine::ZeroOptions::
  // delayed_update_from).
  bool delayed_parameter_update = false;
  int64_t delayed_update_warmup_steps = 40;
};

struct EngineConfig {
  BatchSizes batch;
  double gradient_clipping = 0.0;  // max global L2 norm; 0 = no clipping
  AdamWConfig optimizer;
  engine::LrSchedule lr_schedule;
  engine::Precision precision = engine::Precision::kFp32;
  engine::LossScalerOptions loss_scaler;  // static scale 1 unless fp16
  // torch_autocast.enabled (dtype bfloat16): a torch module's forward runs
  // under torch.autocast, its parameters fp32 (Python's engine only).
  bool torch_autocast = false;
  ZeroConfig zero;
  ZeroShardConfig zeroshard;
  std::vector<std::string> auto_keys;  // paths given as "auto"
  MonitorConfig monitor;               // tensorboard, csv_monitor, wandb, comet
  std::vector<ResolvedKey> resolved;   // every key read: value and source
};

// Parses a DeepSpeed JSON config for `world_size` data-parallel workers,
// filling "auto" values from `inputs`.
// Appends warnings (unknown or unused keys, DeepSpeed's own warnings) to
// `warnings` when it is not null. Invalid JSON is an error with the line
// and column: "invalid JSON at line 3, column 5: Expected , or } after
// key:value pair.".
absl::StatusOr<EngineConfig> ParseDeepSpeedConfig(
    absl::string_view json, int world_size, const AutoInputs& inputs,
    std::vector<std::string>* warnings);
// The same with no inputs (an "auto" that needs one is an error).
absl::StatusOr<EngineConfig> ParseDeepSpeedConfig(
    absl::string_view json, int world_size, std::vector<std::string>* warnings);

// The same for a file, read through `env`. Parse errors and warnings begin
// with "<path>: "; a file that cannot be read is the Env's error, naming it
// too ("open <path>: No such file or directory": NOT_FOUND).
absl::StatusOr<EngineConfig> ParseDeepSpeedConfigFile(
    const std::string& path, int world_size, const AutoInputs& inputs,
    std::vector<std::string>* warnings, Env* env = DefaultEnv());
absl::StatusOr<EngineConfig> ParseDeepSpeedConfigFile(
    const std::string& path, int world_size, std::vector<std::string>* warnings,
    Env* env = DefaultEnv());

// The zeroshard-server flags that give the config's NVMe offload
// ({"--storage=nvme", "--nvme_path=/local_nvme", "--aio_block_size=1048576",
// ...}); empty without one.
std::vector<std::string> NvmeServerFlags(const EngineConfig& config);

// The sentence that tells a user who starts the servers which flags give
// the config's NVMe offload ("" without one): "<key> \"nvme\": the shard
// servers keep the optimizer state on NVMe when each runs with
// --storage=nvme --nvme_path=... (zeroshard train passes these to the
// servers it starts)". The parser adds it to the warnings.
std::string NvmeAdvice(const EngineConfig& config);

// One line for logs: "stage 3 (offload_param=server), bf16, batch 32 = 4 x 2
// x 4 workers, AdamW lr 0.0003 wd 0.1, WarmupCosineLR, clip 1, 2 servers".
std::string DescribeEngineConfig(const EngineConfig& config);

}  // namespace zeroshard::config

#endif  // ZEROSHARD_WORKER_CONFIG_DS_CONFIG_H_
