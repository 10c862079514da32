// The MLP on its own: its layout, the order of its hooks (needs in the
// layout's schedule, gradients last layer first), and bad input.
#include "worker/mlp/mlp.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace zeroshard::mlp {
namespace {

TEST(MlpTest, LayoutAndHooksFollowTheSchedule) {
  const MlpConfig c{3, {5}, 2};
  auto def = MlpModel(c, 2);
  ASSERT_TRUE(def.ok()) << def.status();
  const engine::ModelLayout& layout = def->layout;
  ASSERT_EQ(layout.tensors.size(), 4u);
  EXPECT_EQ(layout.tensors[0].desc.name, "l0.weight");
  EXPECT_EQ(layout.tensors[0].desc.shape, (std::vector<int64_t>{5, 3}));
  EXPECT_EQ(layout.tensors[3].desc.param_group, 1u);
  EXPECT_EQ(layout.num_params(), 5u * 3 + 5 + 2 * 5 + 2);
  EXPECT_EQ(layout.units, (std::vector<Range>{{0, 20}, {20, 32}}));
  EXPECT_EQ(layout.need_schedule, (std::vector<int>{0, 1, 1, 0}));

  std::vector<float> params = MlpInitialParams(layout, 1);
  std::vector<float> grads(layout.num_params(), 0.0f);
  std::vector<std::string> events;
  engine::ModelContext ctx;
  ctx.params = absl::MakeSpan(params);
  ctx.grads = absl::MakeSpan(grads);
  ctx.unit_hook = [&](const engine::UnitEvent& e) {
    events.push_back(
        (e.kind == engine::UnitEvent::Kind::kNeeded ? "need " : "release ") +
        std::to_string(e.unit));
    return absl::OkStatus();
  };
  auto model = def->create(ctx);
  ASSERT_TRUE(model.ok()) << model.status();
  const std::vector<float> x = {0.5f, -1, 2, 1, 0, -0.5f};
  const std::vector<int> y = {1, 0};
  auto loss = (*model)->Forward({{}, x, y});
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_GT(*loss, 0.0f);
  std::vector<int> ready;
  ASSERT_TRUE((*model)
                  ->Backward([&](const engine::GradReady& g) {
                    ready.push_back(g.unit);
                  })
                  .ok());
  EXPECT_EQ(events, (std::vector<std::string>{
                        "need 0", "release 0", "need 1", "release 1", "need 1",
                        "release 1", "need 0", "release 0"}));
  EXPECT_EQ(ready, (std::vector<int>{1, 0}));
  // Gradients reached every tensor; the bias gradients sum to zero over
  // the classes (softmax).
  EXPECT_NE(grads[0], 0.0f);
  EXPECT_NEAR(grads[30] + grads[31], 0.0f, 1e-6f);
}

TEST(MlpTest, BadInputNamesTheProblem) {
  EXPECT_FALSE(MlpLayout(MlpConfig{0, {}, 2}).ok());
  EXPECT_FALSE(MlpLayout(MlpConfig{3, {-1}, 2}).ok());
  EXPECT_FALSE(MlpModel(MlpConfig{3, {}, 2}, 0).ok());
  auto def = MlpModel(MlpConfig{3, {}, 2}, 2);
  ASSERT_TRUE(def.ok());
  std::vector<float> p(def->layout.num_params()), g(p.size());
  std::vector<float> small(3);
  engine::ModelContext bad;
  bad.params = absl::MakeSpan(small);
  bad.grads = absl::MakeSpan(small);
  EXPECT_EQ(def->create(bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  engine::ModelContext ctx;
  ctx.params = absl::MakeSpan(p);
  ctx.grads = absl::MakeSpan(g);
  auto model = def->create(ctx);
  ASSERT_TRUE(model.ok());
  EXPECT_EQ((*model)->Backward(nullptr).code(),
            absl::StatusCode::kFailedPrecondition);
  const std::vector<float> x(6, 1.0f);
  absl::Status s =
      (*model)->Forward({{}, x, {std::vector<int>{0, 2}}}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("row 1 has label 2"), std::string::npos) << s;
  EXPECT_FALSE(
      (*model)->Forward({{}, {x.data(), 5}, {std::vector<int>{0, 1}}}).ok());
}

}  // namespace
}  // namespace zeroshard::mlp
