// A deterministic training run of the ZeRO engine, shared by the tests and
// the zeroshard-worker binary so that an in-process run and a
// multi-process run compute the same thing.
//
// Data: llm.c token files through io::DataLoader (worker/io/data_loader.h)
// with this rank and the world size of the communicator — micro-batch m of
// step s is the loader's step s·gas + m, so a step's global batch is the
// same W·B·gas sequences for every W with the same W·B — or, without files,
// synthetic tokens (below). Initial weights: an llm.c model file, or the
// seeded scheme below.
//
// Initial weights (SeededGpt2Init): GPT-2's scheme from a counter-based
// generator keyed by (seed, flat index) — matrices N(0, std²), LayerNorm
// weights 1, biases and LayerNorm shifts 0 — identical on every process.
// Tokens (SyntheticTokens): uniform in [0, V) keyed by (seed, step,
// sequence, position), where micro-batch m of rank r in a group of W is
// sequence m·W + r of the step — as with the loader, a step's global batch
// is the same for every W and gas with the same W·gas.
//
// Threading: RunTraining uses the engine from the calling thread.
#ifndef ZEROSHARD_WORKER_TRAIN_TRAINER_H_
#define ZEROSHARD_WORKER_TRAIN_TRAINER_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/shard_client.h"
#include "worker/collective/collective.h"
#include "worker/engine/engine.h"
#include "worker/engine/step_stats.h"
#include "worker/engine/zero_options.h"
#include "worker/gpt2/config.h"
#include "worker/io/data_loader.h"

namespace zeroshard::train {

struct TrainSpec {
  gpt2::Config config;
  engine::ZeroOptions zero;
  int steps = 1;
  uint64_t seed = 1;
  double init_std = 0.02;
  // Token files or patterns (DataLoaderOptions::files); empty: synthetic.
  std::vector<std::string> data;
  // Initial parameters from this model file (its config must equal
  // `config`); empty: SeededGpt2Init(seed, init_std).
  std::string init_file;
  // Where the model computes (gpt2::EngineModel): "cpu", "cuda" or
  // "host-emulated".
  std::string device = "cpu";
  // Recompute each block's forward in backward (gpt2::ModelOptions::
  // checkpoint): less activation memory, the same bits.
  bool activation_checkpointing = false;
  // This rank's place in its node (ZEROSHARD_LOCAL_RANK / LOCAL_RANK): with
  // device "cuda" it computes on GPU local_rank mod the GPUs it sees, so
  // the ranks of a node spread over its GPUs (one GPU per process, e.g.
  // CUDA_VISIBLE_DEVICES set per rank, is GPU 0 for all).
  int local_rank = 0;
};

std::vector<float> SeededGpt2Init(const gpt2::ParamLayout& layout,
                                  uint64_t seed, double std);

// inputs then targets (B·T each) of sequence `index` of `step`.
std::vector<int> SyntheticTokens(const TrainSpec& spec, int step, int index);

// With spec.zero.checkpoint_interval > 0 the run starts at the servers'
// newest checkpoint (if any) and survives server restarts by rolling back;
// micro_losses and stats then cover the steps from the first step run to
// spec.steps, each step once (the last time it ran).
struct TrainResult {
  std::vector<float> params;                     // after the last step
  std::vector<std::vector<float>> micro_losses;  // [step][micro]
  std::vector<engine::StepStats> stats;          // per step
  int rollbacks = 0;  // ZeroEngine::rollbacks() at the end
};

// Called after every optimizer step with its stats (on the calling thread).
using StepCallback = std::function<void(const engine::StepStats&)>;

// What a run has done so far, kept up to date while it runs so that it
// still counts when the run fails (a job killed mid-run).
struct TrainProgress {
  int64_t steps_run = 0;  // steps begun; a step redone after a roll back
                          // (or begun and cut short) counts each time
  int rollbacks = 0;      // ZeroEngine::rollbacks(): a resume at start is one
  // The worker group now (elastic runs change it): this rank, its size.
  int rank = 0;
  int world_size = 1;
};

// Creates the engine (collective: every rank calls it with its comm) and
// runs spec.steps optimizer steps; `progress` (may be null) is updated as
// it goes. Errors: the data loader's, the model file's, the engine's.
// The step loop of one engine (RunTraining's and the elastic trainer's,
// worker/elastic/elastic_trainer.h): runs optimizer steps until
// engine.global_step() reaches spec.steps, or `leave` (may be null)
// returns true after a step. `loader` (null: synthetic tokens) must be
// opened for the engine's communicator; it is moved to the engine's
// restored state after a roll back or a continued start. Appends to
// *result as RunTraining describes, with result->micro_losses[i] and
// stats[i] for step *first + i (*first < 0: set to the first step run;
// steps never seen here stay empty).
absl::Status RunSteps(const TrainSpec& spec, engine::ZeroEngine& engine,
                      io::DataLoader* loader, const StepCallback& on_step,
                      TrainProgress* progress, TrainResult* result,
                      int64_t* first,
                      const std::function<bool()>& leave = nullptr);

// Initial parameters of `spec` (its init file, else SeededGpt2Init).
absl::StatusOr<std::vector<float>> InitialParams(const TrainSpec& spec);

// The engine's model of `spec`: GPT-2 of spec.config on micro-batches of
// spec.zero.micro_batch × spec.zero.seq_len tokens
// (worker/gpt2/engine_model.h).
absl::StatusOr<engine::ModelDef> TrainModel(const TrainSpec& spec);

// spec.zero with the run's seed and data files, which the engine records
// with the workers' state.
engine::ZeroOptions EngineOptions(const TrainSpec& spec);

// Opens spec.data for this rank of `comm` (nullopt without data).
absl::StatusOr<std::optional<io::DataLoader>> OpenLoader(
    const TrainSpec& spec, const collective::Communicator& comm);

// Called after on_step, on the same thread, with the engine (to read its
// parameters, e.g. for a periodic eval: ZeroEngine::ReadParameters is not
// collective). An error ends the run with it.
using EngineStepCallback =
    std::function<absl::Status(const engine::StepStats&, engine::ZeroEngine&)>;

absl::StatusOr<TrainResult> RunTraining(
    const TrainSpec& spec, collective::Communicator* comm, ShardClient* client,
    const StepCallback& on_step = nullptr, TrainProgress* progress = nullptr,
    const EngineStepCallback& after_step = nullptr);

}  // namespace zeroshard::train

#endif  // ZEROSHARD_WORKER_TRAIN_TRAINER_H_
