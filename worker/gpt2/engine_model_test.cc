// GPT-2's engine layout: units tile the flat space (embeddings, blocks,
// final norm), the need schedule follows the model's parameter hook order,
// and a model created over the engine's buffers announces exactly that.
#include "worker/gpt2/engine_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace zeroshard::gpt2 {
namespace {

TEST(EngineModelTest, UnitsAndScheduleFollowTheModel) {
  const Config c{16, 64, 64, 3, 2, 32};
  auto layout = EngineLayout(c);
  ASSERT_TRUE(layout.ok()) << layout.status();
  auto gpt = ParamLayout::Create(c);
  ASSERT_TRUE(gpt.ok());
  ASSERT_EQ(layout->units.size(), 5u);
  EXPECT_EQ(layout->units[0], gpt->EmbeddingRange());
  EXPECT_EQ(layout->units[2], gpt->LayerRange(1));
  EXPECT_EQ(layout->units[4], gpt->FinalNormRange());
  EXPECT_EQ(layout->num_params(), gpt->num_params());
  EXPECT_EQ(UnitIndex(GradSegment::Part::kBlock, 2, 3), 3);
  EXPECT_EQ(UnitIndex(GradSegment::Part::kFinalNorm, -1, 3), 4);
  EXPECT_EQ(layout->need_schedule,
            (std::vector<int>{0, 1, 2, 3, 4, 0, 4, 0, 3, 2, 1}));

  // The model's hooks: needs in schedule order, gradients unit by unit in
  // descending flat order.
  auto def = EngineModel(c, 2, 8);
  ASSERT_TRUE(def.ok()) << def.status();
  std::vector<float> params(layout->num_params(), 0.01f),
      grads(layout->num_params(), 0.0f);
  std::vector<int> needed;
  engine::ModelContext ctx;
  ctx.params = absl::MakeSpan(params);
  ctx.grads = absl::MakeSpan(grads);
  ctx.unit_hook = [&](const engine::UnitEvent& e) {
    if (e.kind == engine::UnitEvent::Kind::kNeeded) needed.push_back(e.unit);
    EXPECT_EQ(e.range, layout->units[e.unit]);
    return absl::OkStatus();
  };
  auto model = def->create(ctx);
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<int> tokens(16, 3), targets(16, 5);
  auto loss = (*model)->Forward(engine::MicroBatch{tokens, {}, targets});
  ASSERT_TRUE(loss.ok()) << loss.status();
  std::vector<int> ready;
  ASSERT_TRUE((*model)
                  ->Backward([&](const engine::GradReady& g) {
                    ready.push_back(g.unit);
                    EXPECT_EQ(g.range, layout->units[g.unit]);
                  })
                  .ok());
  EXPECT_EQ(needed, layout->need_schedule);
  EXPECT_EQ(ready, (std::vector<int>{4, 3, 2, 1, 0}));
}

// On a device, the parameters go up once a step: within a step the model
// reads the copy it has (the engine's buffer may change under it, e.g. a
// stage-3 unit released), and after BeginStep it reads the buffer again.
TEST(EngineModelTest, DeviceRefreshesParametersOncePerStep) {
  const Config c{16, 64, 64, 2, 2, 32};
  auto def = EngineModel(c, 2, 8, false, "host-emulated");
  ASSERT_TRUE(def.ok()) << def.status();
  const uint64_t n = def->layout.num_params();
  std::vector<float> params(n), grads(n, 0.0f);
  for (uint64_t i = 0; i < n; ++i) params[i] = 0.02f * ((i * 7919) % 13) - 0.1f;
  engine::ModelContext ctx;
  ctx.params = absl::MakeSpan(params);
  ctx.grads = absl::MakeSpan(grads);
  ctx.unit_hook = [](const engine::UnitEvent&) { return absl::OkStatus(); };
  auto model = def->create(ctx);
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<int> tokens(16), targets(16);
  for (int i = 0; i < 16; ++i) tokens[i] = i % 16, targets[i] = (i * 5) % 16;
  const engine::MicroBatch batch{tokens, {}, targets};
  auto pass = [&]() -> float {
    auto loss = (*model)->Forward(batch);
    EXPECT_TRUE(loss.ok()) << loss.status();
    EXPECT_TRUE((*model)->Backward(nullptr).ok());
    return loss.ok() ? *loss : NAN;
  };
  (*model)->BeginStep();
  const float first = pass();
  for (float& p : params) p *= 0.5f;  // after Backward: every copy waited
  EXPECT_EQ(pass(), first);           // the same step: the device's copy
  (*model)->BeginStep();
  EXPECT_NE(pass(), first);  // a new step: the halved weights
}

// A forward that fails (a unit's fetch) leaves no copy up still reading
// the engine's buffer, which recovery then rewrites: the next step runs on
// the new values and the device reports nothing.
TEST(EngineModelTest, FailedForwardWaitsForItsCopiesUp) {
  const Config c{16, 64, 64, 2, 2, 32};
  auto def = EngineModel(c, 2, 8, false, "host-emulated");
  ASSERT_TRUE(def.ok()) << def.status();
  const uint64_t n = def->layout.num_params();
  std::vector<float> params(n, 0.01f), grads(n, 0.0f);
  int needs = 0, fail_at = 5;  // the embeddings' second need (the logits)
  engine::ModelContext ctx;
  ctx.params = absl::MakeSpan(params);
  ctx.grads = absl::MakeSpan(grads);
  ctx.unit_hook = [&](const engine::UnitEvent& e) {
    if (e.kind != engine::UnitEvent::Kind::kNeeded) return absl::OkStatus();
    return ++needs == fail_at ? absl::UnavailableError("fetch failed")
                              : absl::OkStatus();
  };
  auto model = def->create(ctx);
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<int> tokens(16, 3), targets(16, 5);
  const engine::MicroBatch batch{tokens, {}, targets};
  (*model)->BeginStep();
  EXPECT_EQ((*model)->Forward(batch).status().code(),
            absl::StatusCode::kUnavailable);
  std::fill(params.begin(), params.end(), 0.02f);  // "recovery"
  (*model)->BeginStep();
  auto loss = (*model)->Forward(batch);
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_TRUE((*model)->Backward(nullptr).ok());
}

// A node's ranks spread over the GPUs the process sees; one GPU per process
// (or none: the device's error then says why) is GPU 0 for every rank.
TEST(EngineModelTest, LocalRankPicksTheGpu) {
  EXPECT_EQ(GpuForLocalRank(0, 4), 0);
  EXPECT_EQ(GpuForLocalRank(3, 4), 3);
  EXPECT_EQ(GpuForLocalRank(5, 4), 1);
  EXPECT_EQ(GpuForLocalRank(3, 1), 0);
  EXPECT_EQ(GpuForLocalRank(2, 0), 0);
  EXPECT_EQ(GpuForLocalRank(-1, 2), 0);
}

// The device's parameter pool (device_model.h): with max_live_params 0 a
// model of five blocks holds the embeddings, the final norm and two
// blocks, parameters and gradients (64-byte lines each), and computes what
// the unbounded one does: the same losses and gradients over two steps of
// two micro-batches each, with and without recomputed blocks, the
// parameters changing between steps.
TEST(EngineModelTest, BoundedDevicePoolHoldsLessAndComputesTheSame) {
  const Config c{16, 64, 64, 5, 2, 32};
  for (bool checkpoint : {false, true}) {
    SCOPED_TRACE(checkpoint ? "checkpoint" : "no checkpoint");
    auto def = EngineModel(c, 2, 8, checkpoint, "host-emulated");
    ASSERT_TRUE(def.ok()) << def.status();
    const engine::ModelLayout& layout = def->layout;
    const uint64_t n = layout.num_params();
    struct Run {
      std::vector<float> params, grads;
      std::unique_ptr<engine::Model> model;
    };
    auto make = [&](uint64_t max_live, Run* run) {
      run->params.resize(n);
      for (uint64_t i = 0; i < n; ++i) {
        run->params[i] = 0.02f * static_cast<float>((i * 7919) % 13) - 0.1f;
      }
      run->grads.assign(n, 0.0f);
      engine::ModelContext ctx;
      ctx.params = absl::MakeSpan(run->params);
      ctx.grads = absl::MakeSpan(run->grads);
      ctx.unit_hook = [](const engine::UnitEvent&) { return absl::OkStatus(); };
      ctx.max_live_params = max_live;
      auto m = def->create(ctx);
      ASSERT_TRUE(m.ok()) << m.status();
      run->model = std::move(*m);
    };
    Run bounded, whole;
    ASSERT_NO_FATAL_FAILURE(make(0, &bounded));
    ASSERT_NO_FATAL_FAILURE(make(UINT64_MAX, &whole));
    auto lines = [](uint64_t floats) { return (floats + 15) / 16 * 16; };
    const uint64_t fixed = lines(layout.units[0].size()) +
                           lines(layout.units[c.num_layers + 1].size());
    const uint64_t block = lines(layout.units[1].size());
    EXPECT_EQ(bounded.model->device_bytes(), 2 * 4 * (fixed + 2 * block));
    EXPECT_EQ(whole.model->device_bytes(), 2 * 4 * (fixed + 5 * block));

    std::vector<int> tokens(16), targets(16);
    for (int step = 0; step < 2; ++step) {
      for (Run* r : {&bounded, &whole}) r->model->BeginStep();
      for (int micro = 0; micro < 2; ++micro) {
        for (int i = 0; i < 16; ++i) {
          tokens[i] = (i * 3 + micro + 5 * step) % 16;
          targets[i] = (i * 5 + micro) % 16;
        }
        const engine::MicroBatch batch{tokens, {}, targets};
        std::vector<float> losses;
        for (Run* r : {&bounded, &whole}) {
          r->model->ZeroGrad();
          auto loss = r->model->Forward(batch);
          ASSERT_TRUE(loss.ok()) << loss.status();
          losses.push_back(*loss);
          ASSERT_TRUE(r->model->Backward(nullptr).ok());
        }
        EXPECT_EQ(losses[0], losses[1])
            << "step " << step << " micro " << micro;
        EXPECT_EQ(bounded.grads, whole.grads)
            << "step " << step << " micro " << micro;
      }
      for (Run* r : {&bounded, &whole}) {
        for (uint64_t i = 0; i < n; ++i) r->params[i] -= 0.5f * r->grads[i];
      }
    }
  }
}

}  // namespace
}  // namespace zeroshard::gpt2
