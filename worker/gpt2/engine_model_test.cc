// GPT-2's engine layout: units tile the flat space (embeddings, blocks,
// final norm), the need schedule follows the model's parameter hook order,
// and a model created over the engine's buffers announces exactly that.
#include "worker/gpt2/engine_model.h"

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

}  // namespace
}  // namespace zeroshard::gpt2
