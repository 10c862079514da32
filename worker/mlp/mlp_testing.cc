#include "worker/mlp/mlp_testing.h"

#include <cstdio>
#include <memory>

#include "common/seeded_random.h"
#include "common/status_macros.h"
#include "worker/engine/engine.h"
#include "worker/engine/testing.h"

namespace zeroshard::mlp {
namespace {

float Normal(uint64_t seed, uint64_t i) {
  const uint64_t a = SplitMix64(seed * 0xD1B54A32D192ED03ull + 2 * i);
  const uint64_t b = SplitMix64(seed * 0xD1B54A32D192ED03ull + 2 * i + 1);
  return static_cast<float>(BoxMullerNormal(a, b));
}

}  // namespace

MlpRun TestRun(int stage) {
  MlpRun run;
  engine::ZeroOptions& z = run.zero;
  z.stage = stage;
  z.micro_batch = 4;
  z.seq_len = 1;
  z.gradient_accumulation_steps = 2;
  z.gradient_clipping = 0.5;
  z.lr_schedule.lr = 1e-2;
  z.beta1 = 0.9;
  z.beta2 = 0.95;
  z.eps = 1e-8;
  z.weight_decay = 0.1;
  z.reduce_bucket_size = 300;
  z.job_id = "mlp";
  return run;
}

void Sample(uint64_t seed, const MlpConfig& c, uint64_t index, float* x,
            int* label) {
  const uint64_t D = static_cast<uint64_t>(c.inputs);
  for (uint64_t i = 0; i < D; ++i) x[i] = Normal(seed, index * D + i);
  // The teacher: a fixed map keyed by the seed alone.
  int best = 0;
  float best_score = 0;
  for (int k = 0; k < c.classes; ++k) {
    float score = 0;
    for (uint64_t i = 0; i < D; ++i) {
      score += Normal(seed + 7919, static_cast<uint64_t>(k) * D + i) * x[i];
    }
    if (k == 0 || score > best_score) {
      best = k;
      best_score = score;
    }
  }
  *label = best;
}

uint64_t FirstRow(const MlpRun& run, int world, int step, int micro, int rank) {
  const uint64_t gas =
      static_cast<uint64_t>(run.zero.gradient_accumulation_steps);
  const uint64_t B = static_cast<uint64_t>(run.zero.micro_batch);
  return ((static_cast<uint64_t>(step) * gas + micro) * world + rank) * B;
}

absl::StatusOr<MlpResult> TrainMlp(const MlpRun& run, int world,
                                   LocalFleet* fleet) {
  ZS_ASSIGN_OR_RETURN(engine::ModelDef def,
                      MlpModel(run.config, run.zero.micro_batch));
  const std::vector<float> init = MlpInitialParams(def.layout, run.seed);
  MlpResult result;
  ZS_RETURN_IF_ERROR(engine::RunOnRanks(
      world, fleet, engine::InProcessHooks(),
      [&](int r, collective::Communicator* comm, ShardClient* client,
          collective::InProcessHub*) -> absl::Status {
        ZS_ASSIGN_OR_RETURN(
            std::unique_ptr<engine::ZeroEngine> e,
            engine::ZeroEngine::Create(run.zero, def, init, comm, client));
        const int B = run.zero.micro_batch, D = run.config.inputs;
        std::vector<float> x(static_cast<size_t>(B) * D);
        std::vector<int> y(B);
        for (int s = 0; s < run.steps; ++s) {
          for (int m = 0; m < run.zero.gradient_accumulation_steps; ++m) {
            const uint64_t row = FirstRow(run, world, s, m, r);
            for (int j = 0; j < B; ++j) {
              Sample(run.seed, run.config, row + j,
                     x.data() + static_cast<size_t>(j) * D, &y[j]);
            }
            ZS_ASSIGN_OR_RETURN(float loss,
                                e->Forward(engine::MicroBatch{{}, x, y}));
            ZS_RETURN_IF_ERROR(e->Backward());
            ZS_RETURN_IF_ERROR(e->Step());
            if (r == 0) result.losses.push_back(loss);
          }
          if (r == 0) result.clips.push_back(e->last_step_stats().clip_coef);
        }
        if (r != 0) return absl::OkStatus();
        result.params.assign(def.layout.num_params(), 0.0f);
        return e->ReadParameters(absl::MakeSpan(result.params));
      }));
  std::printf(
      "digest: mlp stage %d%s%s W=%d K=%u steps=%d params crc32c %08x\n",
      run.zero.stage, run.zero.offload_param_server ? "+offload" : "",
      run.zero.server_aggregation ? "+aggregation" : "", world,
      fleet != nullptr ? static_cast<unsigned>(fleet->addresses().size()) : 0u,
      run.steps, engine::DigestOf(result.params));
  std::fflush(stdout);
  return result;
}

}  // namespace zeroshard::mlp
