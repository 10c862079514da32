#include "worker/train/trainer.h"

#include <cmath>
#include <cstdio>
#include <optional>

#include "common/seeded_random.h"
#include "common/status_macros.h"
#include "worker/engine/engine.h"
#include "worker/gpt2/engine_model.h"
#include "worker/io/data_loader.h"
#include "worker/io/model_file.h"
#include "worker/train/run_changes.h"

namespace zeroshard::train {
namespace {

// N(0, 1), counter-based.
double Normal(uint64_t seed, uint64_t index) {
  return BoxMullerNormal(SplitMix64(SplitMix64(seed) + 2 * index),
                         SplitMix64(SplitMix64(seed) + 2 * index + 1));
}

}  // namespace

std::vector<float> SeededGpt2Init(const gpt2::ParamLayout& layout,
                                  uint64_t seed, double std) {
  std::vector<float> p(layout.num_params(), 0.0f);
  for (const gpt2::ParamTensor& t : layout.tensors()) {
    const bool norm_weight = t.kind == gpt2::ParamKind::kLn1w ||
                             t.kind == gpt2::ParamKind::kLn2w ||
                             t.kind == gpt2::ParamKind::kLnfw;
    for (uint64_t i = t.offset; i < t.offset + t.numel; ++i) {
      if (gpt2::IsMatrix(t.kind)) {
        p[i] = static_cast<float>(std * Normal(seed, i));
      } else if (norm_weight) {
        p[i] = 1.0f;
      }
    }
  }
  return p;
}

std::vector<int> SyntheticTokens(const TrainSpec& spec, int step, int index) {
  const int bt = spec.zero.micro_batch * spec.zero.seq_len;
  std::vector<int> tokens(2 * bt);
  const uint64_t key =
      SplitMix64(spec.seed ^ SplitMix64((uint64_t(step) << 40) ^
                                        static_cast<uint64_t>(index)));
  // targets are the next token of a stream, like a data loader's.
  std::vector<int> stream(bt + 1);
  for (int i = 0; i <= bt; ++i) {
    stream[i] = static_cast<int>(SplitMix64(key + i) %
                                 static_cast<uint64_t>(spec.config.vocab_size));
  }
  for (int i = 0; i < bt; ++i) {
    tokens[i] = stream[i];
    tokens[bt + i] = stream[i + 1];
  }
  return tokens;
}

absl::StatusOr<std::vector<float>> InitialParams(const TrainSpec& spec) {
  ZS_ASSIGN_OR_RETURN(gpt2::ParamLayout layout,
                      gpt2::ParamLayout::Create(spec.config));
  if (spec.init_file.empty()) {
    return SeededGpt2Init(layout, spec.seed, spec.init_std);
  }
  std::vector<float> init(layout.num_params(), 0.0f);
  ZS_RETURN_IF_ERROR(io::ReadModelParams(spec.init_file, layout, init.data()));
  return init;
}

absl::StatusOr<std::optional<io::DataLoader>> OpenLoader(
    const TrainSpec& spec, const collective::Communicator& comm) {
  if (spec.data.empty()) return std::optional<io::DataLoader>();
  io::DataLoaderOptions lo;
  lo.files = spec.data;
  lo.batch_size = spec.zero.micro_batch;
  lo.seq_len = spec.zero.seq_len;
  lo.rank = comm.rank();
  lo.world_size = comm.size();
  lo.vocab_size = spec.config.vocab_size;
  ZS_ASSIGN_OR_RETURN(io::DataLoader loader, io::DataLoader::Open(lo));
  return std::optional<io::DataLoader>(std::move(loader));
}

engine::ZeroOptions EngineOptions(const TrainSpec& spec) {
  engine::ZeroOptions o = spec.zero;
  o.seed = spec.seed;
  o.data = DataRecord(spec.data);
  return o;
}

absl::Status RunSteps(const TrainSpec& spec, engine::ZeroEngine& engine,
                      io::DataLoader* loader, const StepCallback& on_step,
                      TrainProgress* progress, TrainResult* result,
                      int64_t* first, const std::function<bool()>& leave) {
  const int gas = engine.options().gradient_accumulation_steps;
  const int bt = engine.options().micro_batch * engine.options().seq_len;
  const int rank = engine.comm().rank(), world = engine.comm().size();
  std::vector<int> tok(2 * bt);
  if (rank == 0 && engine.global_step() >= spec.steps &&
      engine.global_step() > 0) {
    std::printf(
        "nothing to train: the servers' job is at step %lld, and --steps is "
        "%d (the final parameters are those of step %lld; a larger --steps "
        "continues it)\n",
        static_cast<long long>(engine.global_step()), spec.steps,
        static_cast<long long>(engine.global_step()));
    std::fflush(stdout);
  }
  progress->rank = rank;
  progress->world_size = world;
  // Steps are numbered by the engine: a start from a checkpoint or the
  // servers' last commit, or a roll back (a server restarted), moves it,
  // and the data follows.
  const int rollbacks_before = progress->rollbacks;  // of earlier engines
  int rollbacks = -1;
  while (engine.global_step() < spec.steps) {
    const int s = static_cast<int>(engine.global_step());
    ++progress->steps_run;
    progress->rollbacks = rollbacks_before + engine.rollbacks();
    if (engine.rollbacks() != rollbacks) {
      rollbacks = engine.rollbacks();
      if ((rollbacks > 0 || engine.continued()) && loader != nullptr) {
        const v1::TrainerState& st = engine.restored_state();
        io::LoaderPosition pos;
        pos.epoch = st.data_epoch();
        pos.shard = st.data_shard();
        pos.offset = st.data_offset();
        ZS_RETURN_IF_ERROR(loader->Seek(pos));
      }
      if (rank == 0 && *first >= 0) {
        std::printf(
            "rolled back to checkpoint %d (the servers' newest common "
            "one)%s%s\n",
            s, engine.rollback_reason().empty() ? "" : ": ",
            engine.rollback_reason().c_str());
        std::fflush(stdout);
      }
      if (rank == 0 && *first < 0 && s > 0) {
        std::printf(
            "continuing the job at step %d of %d (the servers' newest "
            "checkpoint or last commit)\n",
            s + 1, spec.steps);
        const std::string changed = DescribeRunChanges(
            RunChanges(engine.restored_state(), engine.StateNow()),
            engine.restored_state());
        if (!changed.empty()) std::printf("%s\n", changed.c_str());
        std::fflush(stdout);
      }
      if (*first < 0 || s < *first) *first = s;
      // Steps from s on are (re)done.
      result->micro_losses.resize(s - *first);
      result->stats.resize(s - *first);
    }
    if (loader != nullptr) {
      const io::LoaderPosition& pos = loader->position();
      engine.set_data_position(pos.epoch, pos.shard, pos.offset);
    }
    std::vector<float> losses;
    for (int m = 0; m < gas; ++m) {
      if (loader != nullptr) {
        ZS_RETURN_IF_ERROR(loader->Next(tok.data(), tok.data() + bt));
      } else {
        tok = SyntheticTokens(spec, s, m * world + rank);
      }
      ZS_ASSIGN_OR_RETURN(float loss,
                          engine.Forward({tok.data(), size_t(bt)},
                                         {tok.data() + bt, size_t(bt)}));
      losses.push_back(loss);
      ZS_RETURN_IF_ERROR(engine.Backward());
      if (m + 1 == gas && loader != nullptr) {
        // Checkpoints taken at this step record the next step's position.
        const io::LoaderPosition& pos = loader->position();
        engine.set_data_position(pos.epoch, pos.shard, pos.offset);
      }
      ZS_RETURN_IF_ERROR(engine.Step());
    }
    // After a roll back the step counts only if the checkpoint restored
    // is the one taken right after it.
    if (engine.rollbacks() != rollbacks && engine.global_step() != s + 1) {
      continue;  // redo from there
    }
    result->micro_losses.resize(s - *first);
    result->stats.resize(s - *first);
    result->micro_losses.push_back(losses);
    result->stats.push_back(engine.last_step_stats());
    if (on_step) on_step(result->stats.back());
    if (leave && engine.global_step() < spec.steps && leave()) break;
  }
  progress->rollbacks = rollbacks_before + engine.rollbacks();
  return absl::OkStatus();
}

absl::StatusOr<engine::ModelDef> TrainModel(const TrainSpec& spec) {
  return gpt2::EngineModel(spec.config, spec.zero.micro_batch,
                           spec.zero.seq_len, spec.activation_checkpointing,
                           spec.device, spec.local_rank);
}

absl::StatusOr<TrainResult> RunTraining(const TrainSpec& spec,
                                        collective::Communicator* comm,
                                        ShardClient* client,
                                        const StepCallback& on_step,
                                        TrainProgress* progress,
                                        const EngineStepCallback& after_step) {
  std::vector<float> init;
  if (spec.zero.stage == 0 || comm->rank() == 0) {
    ZS_ASSIGN_OR_RETURN(init, InitialParams(spec));
  }
  ZS_ASSIGN_OR_RETURN(std::optional<io::DataLoader> loader,
                      OpenLoader(spec, *comm));
  ZS_ASSIGN_OR_RETURN(engine::ModelDef model, TrainModel(spec));
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<engine::ZeroEngine> engine,
                      engine::ZeroEngine::Create(EngineOptions(spec), model,
                                                 init, comm, client));
  TrainProgress scratch;
  if (progress == nullptr) progress = &scratch;
  TrainResult result;
  int64_t first = -1;
  // An after_step error stops the loop (leave) and is returned.
  absl::Status after_status;
  StepCallback step_cb = on_step;
  std::function<bool()> leave;
  if (after_step) {
    step_cb = [&](const engine::StepStats& s) {
      if (on_step) on_step(s);
      if (after_status.ok()) after_status = after_step(s, *engine);
    };
    leave = [&after_status] { return !after_status.ok(); };
  }
  ZS_RETURN_IF_ERROR(RunSteps(spec, *engine,
                              loader.has_value() ? &*loader : nullptr, step_cb,
                              progress, &result, &first, leave));
  ZS_RETURN_IF_ERROR(after_status);
  result.rollbacks = engine->rollbacks();
  result.params.assign(engine->layout().num_params(), 0.0f);
  ZS_RETURN_IF_ERROR(engine->ReadParameters(absl::MakeSpan(result.params)));
  return result;
}

}  // namespace zeroshard::train
