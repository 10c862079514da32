// The training options that zeroshard-worker and `zeroshard train` share:
// one struct, one registration (the same flag names, defaults and help
// text on both binaries), one validation, and the argv that gives a worker
// the same options (what the launcher passes).
//
//   --config ds.json --data 'tok_*.bin' [--model_file init.bin |
//   --layers L --heads H --channels C --vocab V [--max_seq_len M]]
//   --seq_len T --steps S --seed N --init_std X --threads N --save out.bin
//   --checkpoint_interval N --job_id ID --val_data val.bin --eval_every N
//   [--tls_ca ... --insecure]
//
// Flags that belong to one side stay there: the launcher's (--servers
// count, --workers, --nodes, --work_dir, ...) in launcher/train_options.h,
// the worker's (--servers addresses, --port_file, --metrics_*, --elastic,
// ...) in worker/train/worker_cli.h.
//
// Example (the launcher):
//   TrainFlags f;
//   AddTrainFlags(&flag_set, &f);
//   ... flag_set.Parse(...), ZS_RETURN_IF_ERROR(ValidateTrainFlags(f));
//   for (std::string& a : TrainFlagsArgv(f)) worker_argv.push_back(a);
//
// Errors: INVALID_ARGUMENT (NOT_FOUND for a missing model file) with one
// line naming the flag. Threading: plain values and functions; AddTrainFlags
// follows FlagSet's rules (common/flags.h: `f` must outlive the FlagSet).
#ifndef ZEROSHARD_WORKER_TRAIN_TRAIN_FLAGS_H_
#define ZEROSHARD_WORKER_TRAIN_TRAIN_FLAGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/security.h"
#include "common/flags.h"
#include "worker/config/auto_inputs.h"
#include "worker/config/ds_config.h"
#include "worker/gpt2/config.h"
#include "worker/train/trainer.h"

namespace zeroshard::train {

struct TrainFlags {
  std::string config;      // DeepSpeed JSON (required)
  std::string data;        // token files or patterns, comma-separated
  std::string model_file;  // llm.c model; else the shape below
  // The shape of a seeded GPT-2 (without --model_file).
  int64_t layers = 2, heads = 4, channels = 128, vocab = 256;
  int64_t max_seq_len = 0;  // maxT; 0: seq_len
  int64_t seq_len = 64, steps = 100, seed = 1, threads = 1;
  double init_std = 0.02;
  std::string save;                  // rank 0 writes the final model
  int64_t checkpoint_interval = -1;  // -1: the config's
  std::string device;                // empty: the config's zeroshard.device
  bool activation_checkpointing = false;  // recompute blocks in backward
  std::string job_id = "zero";
  // Eval (eval_loss.h): held-out token files (empty: the first batch of
  // the training data) and the period (0: about 20 per run; -1: the end).
  std::string val_data;
  int64_t eval_every = 0;
  ClientSecurityFlags security;  // client/security.h
  // What fills the config's "auto" values (worker/config/auto_inputs.h:
  // --learning_rate, --precision, ...; steps and hidden_size are not
  // flags: ParseConfigForFlags takes them from --steps and the model).
  config::AutoInputs autos;
};

bool operator==(const TrainFlags& a, const TrainFlags& b);
inline bool operator!=(const TrainFlags& a, const TrainFlags& b) {
  return !(a == b);
}

// Declares the flags above on `flags`, with `f`'s values as defaults.
void AddTrainFlags(FlagSet* flags, TrainFlags* f);

// Checks what needs no file: --config given, the ranges of the numbers,
// and (without --model_file) the shape.
absl::Status ValidateTrainFlags(const TrainFlags& f);

// The model: --model_file's header, else the shape flags. Also checks
// --seq_len against its max_seq_len.
absl::StatusOr<gpt2::Config> ModelFromFlags(const TrainFlags& f);

// The run of `f` under the parsed DeepSpeed `config`: the model
// (ModelFromFlags), ZeroOptions from the config (errors begin with
// "<config path>: ") with --seq_len, --threads, --job_id and
// --checkpoint_interval applied, steps, seed, init_std, the data patterns
// and the init file. Appends config warnings to `warnings` (may be null).
absl::StatusOr<TrainSpec> TrainSpecFromFlags(
    const TrainFlags& f, const config::EngineConfig& config,
    std::vector<std::string>* warnings);

// The DeepSpeed config of `f` (--config) for `world_size` workers, its
// "auto" values filled from f.autos, --steps and the model's hidden size
// (ModelFromFlags). Errors and warnings begin with "<config path>: ".
absl::StatusOr<config::EngineConfig> ParseConfigForFlags(
    const TrainFlags& f, int world_size, std::vector<std::string>* warnings);

// "--name=value" for every field that differs from TrainFlags{}'s (the
// security flags as ClientSecurityArgs gives them): parsing these with
// AddTrainFlags gives `f` back.
std::vector<std::string> TrainFlagsArgv(const TrainFlags& f);

}  // namespace zeroshard::train

#endif  // ZEROSHARD_WORKER_TRAIN_TRAIN_FLAGS_H_
