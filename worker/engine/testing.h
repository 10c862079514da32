// Test support: runs a TrainSpec on W ranks that are threads of this
// process (InProcessHub + HostCommunicator, part alignment 64) against K
// real zeroshard-server processes (LocalFleet; none for stage 0).
#ifndef ZEROSHARD_WORKER_ENGINE_TESTING_H_
#define ZEROSHARD_WORKER_ENGINE_TESTING_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fleet/local_fleet.h"
#include "worker/train/trainer.h"

namespace zeroshard::collective {
class Communicator;
class InProcessHub;
}  // namespace zeroshard::collective

namespace zeroshard::engine {

inline constexpr uint32_t kTestAlignment = 64;

// The small GPT-2 of the tests: L=2, C=32, NH=2, maxT=16, V=64 (Vp=64).
gpt2::Config TinyConfig();

// The tests' common run: TinyConfig, B=2, T=16, gas=2, clipping at 0.5
// (it engages), lr 1e-2, weight decay 0.1, buckets of 3008 elements,
// init std 0.1, 8 steps; job id `job`.
train::TrainSpec TinySpec(int stage, bool offload, const std::string& job);

// Results of every rank, in rank order.
absl::StatusOr<std::vector<train::TrainResult>> RunInProcess(
    const train::TrainSpec& spec, int world, uint32_t servers);

// Starts K real servers for tests (--threads=1 --grpc_threads=8 and
// `extra_args`), logs and port files in $TEST_TMPDIR (or /tmp).
absl::StatusOr<std::unique_ptr<LocalFleet>> StartTestFleet(
    uint32_t servers, const std::vector<std::string>& extra_args);

// As RunInProcess, against running servers (null for stage 0), which may
// be restarted while it runs.
absl::StatusOr<std::vector<train::TrainResult>> RunInProcessOn(
    const train::TrainSpec& spec, int world, LocalFleet* fleet);

// Hooks of RunInProcessWith (each may be empty).
struct InProcessHooks {
  // Adjusts rank r's client options before it connects (fault injection).
  std::function<void(int rank, ClientOptions*)> client_options;
  // Called on rank r's thread after each of its steps; `hub` connects the
  // ranks (InProcessHub::Kill on every rank stops the job like a killed
  // worker).
  std::function<void(int rank, const StepStats&, collective::InProcessHub* hub)>
      on_step;
  // When not null: resized to `world`, rank r's progress, kept when a rank
  // fails.
  std::vector<train::TrainProgress>* progress = nullptr;
  // > 0: the ranks' collectives cross emulated links of this bandwidth and
  // latency (InProcessHub::SetLink).
  double link_bytes_per_second = 0;
  absl::Duration link_latency;
};

// Runs fn(rank, comm, client, hub) on `world` ranks that are threads of
// this process (HostCommunicators over one InProcessHub, part alignment
// kTestAlignment; each rank's own ShardClient to `fleet`, null without one),
// with `hooks`' client options and links. The first failing rank's status,
// naming the rank.
using RankFn =
    std::function<absl::Status(int rank, collective::Communicator*,
                               ShardClient*, collective::InProcessHub*)>;
absl::Status RunOnRanks(int world, LocalFleet* fleet,
                        const InProcessHooks& hooks, const RankFn& fn);

// CRC-32C of the parameters' bits (the tests' "digest:" lines).
uint32_t DigestOf(const std::vector<float>& params);

// As RunInProcessOn, with `hooks`.
absl::StatusOr<std::vector<train::TrainResult>> RunInProcessWith(
    const train::TrainSpec& spec, int world, LocalFleet* fleet,
    const InProcessHooks& hooks);

// An empty directory $TEST_TMPDIR/<name> (or /tmp/<name>), removed first if
// it exists.
std::string FreshTestDir(const std::string& name);

// The recovery tests' run: TinySpec at stage 3 (job "ckpt-job"), `steps`
// steps, a checkpoint every 4, a 60 s recovery timeout.
train::TrainSpec CheckpointedSpec(int steps);

// Rank 0's result of `spec` on 2 ranks against K fresh servers that
// checkpoint to `dir`.
absl::StatusOr<train::TrainResult> RunCheckpointed(const train::TrainSpec& spec,
                                                   uint32_t servers,
                                                   const std::string& dir);

// Writes `count` pseudo-random tokens in [0, vocab) (keyed by `seed`) as a
// token file $TEST_TMPDIR/<name>.bin (or /tmp); returns its path.
absl::StatusOr<std::string> WriteTestTokens(const std::string& name,
                                            int64_t count, int vocab,
                                            uint64_t seed);

// A DeepSpeed JSON config that ZeroOptionsFromConfig (ds_options.h) maps
// back onto spec.zero (seq_len, threads, job_id and poisoning aside, which
// are not DeepSpeed keys), with zeroshard.alignment `alignment`.
std::string DeepSpeedJson(const train::TrainSpec& spec, uint32_t alignment);

// zeroshard-worker's flags for `spec` (TrainFlagsArgv, train_flags.h:
// model, data, steps, seed, job, device; its config written to `config_path` by
// DeepSpeedJson).
std::vector<std::string> TrainWorkerFlags(const train::TrainSpec& spec,
                                          const std::string& config_path);

// Flips one bit of the byte 100 bytes before the end of `path` (in a
// checkpoint shard file: inside the last payload block, not its checksum).
// False when the file cannot be read and written.
bool FlipByteNearEnd(const std::string& path);

// Worst per-tensor max |a - b| / max |b - init| over spec's layout (init:
// InitialParams(spec)); the key third of qkvb, whose gradient is zero in
// exact arithmetic (rounding noise), excluded. Infinite if the layout or
// the initial parameters cannot be made.
double WorstUpdateRel(const train::TrainSpec& spec, const std::vector<float>& a,
                      const std::vector<float>& b);

// Index of the first differing bit pattern, or -1 when equal.
int64_t FirstDifference(const std::vector<float>& a,
                        const std::vector<float>& b);

}  // namespace zeroshard::engine

#endif  // ZEROSHARD_WORKER_ENGINE_TESTING_H_
