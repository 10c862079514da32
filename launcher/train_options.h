// `zeroshard train`: its command line, checked before anything starts.
//
//   zeroshard train --config ds_config.json --data 'tokens_*.bin'
//       [--servers N | --server_addrs host:port,...] [--workers W]
//       [--nodes M] [--model_file init.bin | --layers L --heads H
//       --channels C --vocab V] [--seq_len T] [--steps S] [--save final.bin]
//       [--work_dir DIR] [--print_every N] [--threads N] [--seed N]
//
// The training options (--config, --data, the model, --seq_len, --steps,
// --save, --checkpoint_interval, --job_id, the client security flags, the
// flags that fill the config's "auto" values such as --learning_rate and
// --precision (worker/config/auto_inputs.h), ...)
// are zeroshard-worker's, declared once in worker/train/train_flags.h and
// handed to every worker as they are; the rest are the launcher's own.
// Flags may be spelled with '-' or '_' (--model-file = --model_file).
// Every problem found here — a bad flag, a missing or malformed data or
// model file, a data file with a token id >= the vocabulary or fewer
// tokens than one step of all workers (W*B*T + 1; the whole data is read
// once), a DeepSpeed config that the parser or the engine rejects, a
// --val_data that names no usable token file, an inconsistent
// --checkpoint_dir (or a checkpoint interval for the servers the launcher
// starts without one), a --save whose directory is missing or not
// writable or that is one of the --data/--val_data files
// (launcher/save_path.h) — is one line naming it; the caller exits 2 with
// nothing started (no work dir either).
//
// Tests only: --worker_binary=PATH runs PATH instead of zeroshard-worker
// (e.g. zeroshard-worker-for-tests, which has failure points).
#ifndef ZEROSHARD_LAUNCHER_TRAIN_OPTIONS_H_
#define ZEROSHARD_LAUNCHER_TRAIN_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/config/ds_config.h"
#include "worker/train/train_flags.h"
#include "worker/train/trainer.h"

namespace zeroshard {

struct TrainOptions {
  // As given on the command line: the workers' options (as they pass to
  // each worker), then the launcher's own.
  train::TrainFlags train;
  std::string server_addrs, checkpoint_dir;
  std::string work_dir = "/tmp/zeroshard-train";
  std::string worker_binary;  // tests; empty: zeroshard-worker
  uint32_t servers = 0;       // 0: the config's zeroshard.servers count, else 2
  // Optimizer threads of each server the launcher starts (zeroshard-server
  // --threads); 0: this machine's cores shared out among them, at least 2
  // (ParseTrainOptions puts the count here).
  uint32_t server_threads = 0;
  uint32_t workers = 2, nodes = 1;
  int64_t print_every = 0;  // 0: about 20 plain lines per run
  // A note when no step came for this long (a stopped or stuck process);
  // 0: never.
  int64_t stall_seconds = 60;
  // With --checkpoint_dir and servers the launcher started: a worker that
  // fails stops the others and all are started again, up to this many
  // times, continuing from the servers' state (torchrun's --max_restarts).
  uint32_t max_restarts = 3;

  // Derived by ParseTrainOptions.
  config::EngineConfig engine;
  std::vector<std::string> config_warnings;
  train::TrainSpec spec;                // the model and the engine's options
  std::vector<std::string> data_files;  // the patterns, expanded
  // Existing servers to use (--server_addrs or the config's list); empty
  // with num_servers > 0: the launcher starts that many.
  std::vector<std::string> server_addresses;
  uint32_t num_servers = 0;  // 0 for stage 0 (no servers)
  // Flags for the servers the launcher starts, from the config's NVMe
  // offload (config::NvmeServerFlags): "--storage=nvme", ...
  std::vector<std::string> server_flags;
};

// Parses argv[2..) (argv[1] is "train"). --help prints the usage and exits
// 0. INVALID_ARGUMENT (or NOT_FOUND for a missing file) with a one-line
// message otherwise.
absl::StatusOr<TrainOptions> ParseTrainOptions(int argc, char** argv);

// --server_threads 0: `cores` (the machine's; 0 when unknown) shared out
// among `servers`, at least 2 each (zeroshard-server's own default).
uint32_t AutoServerThreads(uint32_t servers, unsigned cores);

// --server_addrs and --server_threads, as `zeroshard train` and `zeroshard
// run` declare them.
void AddServerFlags(FlagSet* flags, std::string* server_addrs,
                    uint32_t* server_threads);

// torchrun's --nproc_per_node and deepspeed's --num_gpus, answered with
// --workers (FlagSet::Foreign), as both commands do.
void AddWorkerCountHints(FlagSet* flags);

// Every worker's argv after the binary (no rank-specific flags): the
// training options and `servers` (host:port,...; empty: none).
std::vector<std::string> WorkerArgs(const TrainOptions& o,
                                    const std::string& servers);

}  // namespace zeroshard

#endif  // ZEROSHARD_LAUNCHER_TRAIN_OPTIONS_H_
