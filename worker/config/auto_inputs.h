// What fills the "auto" values of a DeepSpeed config (the ones Hugging
// Face's Trainer writes): the run's command line and its model. Named
// after Hugging Face's TrainingArguments, so a Trainer user finds the same
// knobs:
//
//   "auto" key                                    filled from
//   train_micro_batch_size_per_gpu --per_device_train_batch_size,
//                                                 else derived (DeepSpeed's
//                                                 rule)
//   gradient_accumulation_steps --gradient_accumulation_steps,
//                                                 else derived (1 when free)
//   train_batch_size                              --per_device_train_batch_size
//                                                 x
//                                                 --gradient_accumulation_steps
//                                                 x world (both given, as
//                                                 Hugging Face), else derived:
//                                                 micro x gas x world
//   optimizer.params.lr                           --learning_rate (required)
//   optimizer.params.betas                        --adam_beta1, --adam_beta2
//                                                 (default 0.9, 0.999)
//   optimizer.params.eps                          --adam_epsilon (1e-8)
//   optimizer.params.weight_decay                 --weight_decay (0)
//   scheduler.params.warmup_num_steps             --warmup_steps (0)
//   scheduler.params.total_num_steps              --steps (required)
//   scheduler.params.warmup_max_lr                --learning_rate, else
//                                                 optimizer.params.lr
//   scheduler.params.warmup_min_lr                0 (as Hugging Face)
//   fp16.enabled, bf16.enabled                    --precision=fp32|fp16|bf16
//                                                 (required)
//   gradient_clipping                             --max_grad_norm (1.0)
//   zero_optimization.reduce_bucket_size          model: hidden^2
//   zero_optimization.stage3_prefetch_bucket_size model: 0.9 hidden^2
//   zero_optimization.stage3_param_persistence_threshold  model: 10 hidden
//   zeroshard.servers                             the launcher decides
//
// The defaults in parentheses are Hugging Face's TrainingArguments'; the
// table row of such a value says "(default)". "(required)": an "auto" with
// nothing to fill it is an error naming the key and the flag. A flag given
// while its key holds a number in the file draws a warning (the file's
// number is used).
//
// Plain values and functions; thread-safe except AddAutoFlags (FlagSet's
// rules: `in` must outlive the FlagSet).
#ifndef ZEROSHARD_WORKER_CONFIG_AUTO_INPUTS_H_
#define ZEROSHARD_WORKER_CONFIG_AUTO_INPUTS_H_

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/flags.h"

namespace zeroshard::config {

struct AutoInputs {
  static constexpr double kUnset = std::numeric_limits<double>::quiet_NaN();
  // Flags (AddAutoFlags); -1, NaN or "": not given.
  int64_t per_device_train_batch_size = -1;
  int64_t gradient_accumulation_steps = -1;
  double learning_rate = kUnset;
  double adam_beta1 = kUnset, adam_beta2 = kUnset, adam_epsilon = kUnset;
  double weight_decay = kUnset;
  int64_t warmup_steps = -1;
  double max_grad_norm = kUnset;
  std::string precision;  // fp32, fp16 or bf16
  // From the run, not AddAutoFlags: its steps (--steps) and the model's
  // hidden size (-1: not known), with how it was found.
  int64_t steps = -1;
  int64_t hidden_size = -1;
  std::string hidden_size_from = "model";
};

bool operator==(const AutoInputs& a, const AutoInputs& b);

// Declares the flags of AutoInputs (not steps or hidden_size) on `flags`.
void AddAutoFlags(FlagSet* flags, AutoInputs* in);

// "--name=value" for each flag that is given (parsing them with
// AddAutoFlags gives the flags back).
std::vector<std::string> AutoFlagsArgv(const AutoInputs& in);

// Ranges: sizes >= 1, warmup >= 0, rates and norms finite and >= 0, betas
// in [0, 1), precision one of the three. INVALID_ARGUMENT naming the flag.
absl::Status ValidateAutoInputs(const AutoInputs& in);

// The inputs written as flags in one string, for the C API and Python:
// "--learning_rate=3e-4 --steps=1000 --hidden_size=768" (the flags of
// AddAutoFlags plus --steps and --hidden_size, separated by spaces).
// INVALID_ARGUMENT naming an unknown or bad flag.
absl::StatusOr<AutoInputs> ParseAutoInputs(absl::string_view args);

}  // namespace zeroshard::config

#endif  // ZEROSHARD_WORKER_CONFIG_AUTO_INPUTS_H_
