// `zeroshard train`: its command line, checked before anything starts.
//
//   zeroshard train --config ds_config.json --data 'tokens_*.bin'
//       [--servers N | --server_addrs host:port,...] [--workers W]
//       [--nodes M] [--model_file init.bin | --model_config L,H,C]
//       [--vocab V] [--seq_len T] [--steps S] [--save final.bin]
//       [--work_dir DIR] [--print_every N] [--threads N] [--seed N]
//
// Flags may be spelled with '-' or '_' (--model-file = --model_file).
// Every problem found here — a bad flag, a missing or malformed data or
// model file, a DeepSpeed config that the parser or the engine rejects,
// an inconsistent --checkpoint_dir — is one line naming it; the caller
// exits 2 with nothing started.
#ifndef ZEROSHARD_LAUNCHER_TRAIN_OPTIONS_H_
#define ZEROSHARD_LAUNCHER_TRAIN_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/security.h"
#include "worker/config/ds_config.h"
#include "worker/engine/zero_options.h"
#include "worker/gpt2/config.h"

namespace zeroshard {

struct TrainOptions {
  // As given on the command line.
  std::string config, data, model_file, model_config = "2,4,128", save;
  std::string server_addrs, checkpoint_dir;
  int64_t checkpoint_every = 100;
  std::string work_dir = "/tmp/zeroshard-train";
  uint32_t servers = 0;  // 0: the config's zeroshard.servers count, else 2
  uint32_t workers = 2, nodes = 1;
  int64_t vocab = 256, seq_len = 64, steps = 100, seed = 1, threads = 1;
  int64_t print_every = 0;  // 0: about 20 plain lines per run
  double init_std = 0.02;
  // TLS and token of --server_addrs servers, passed on to the workers
  // (client/security.h); the launcher's own servers are plaintext on
  // loopback.
  ClientSecurityFlags security;

  // Derived by ParseTrainOptions.
  config::EngineConfig engine;
  std::vector<std::string> config_warnings;
  gpt2::Config model;
  engine::ZeroOptions zero;
  std::vector<std::string> data_files;  // the patterns, expanded
  // Existing servers to use (--server_addrs or the config's list); empty
  // with num_servers > 0: the launcher starts that many.
  std::vector<std::string> server_addresses;
  uint32_t num_servers = 0;  // 0 for stage 0 (no servers)
};

// Parses argv[2..) (argv[1] is "train"). --help prints the usage and exits
// 0. INVALID_ARGUMENT (or NOT_FOUND for a missing file) with a one-line
// message otherwise.
absl::StatusOr<TrainOptions> ParseTrainOptions(int argc, char** argv);

// The zeroshard-worker flags (no rank-specific ones) for `o`.
std::vector<std::string> WorkerFlags(const TrainOptions& o,
                                     const std::string& servers);

}  // namespace zeroshard

#endif  // ZEROSHARD_LAUNCHER_TRAIN_OPTIONS_H_
