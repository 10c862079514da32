// A model that is not GPT-2 through the same engine: the MLP (mlp.h) trains
// at stages 0, 1, 2, 3 and 3 with parameter offload, with W in {1, 2}
// in-process ranks and K in {1, 2, 3} real shard servers, with clipping on
// and engaged, and gives the same parameter bits and losses in every case;
// with server-side aggregation every stage gives the same bits as the
// others (and, at W = 1, the same as reduction among workers).
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/testing.h"
#include "worker/mlp/mlp_testing.h"

namespace zeroshard::mlp {
namespace {

class MlpEngineTest : public ::testing::TestWithParam<int> {};

TEST_P(MlpEngineTest, EveryStageAndServerCountGivesTheSameBits) {
  const int world = GetParam();
  auto base = TrainMlp(TestRun(0), world, nullptr);
  ASSERT_TRUE(base.ok()) << base.status();
  int clipped = 0;
  for (float c : base->clips) clipped += c < 1.0f;
  EXPECT_GT(clipped, 0) << "clipping never engaged; lower the max norm";
  EXPECT_LT(base->losses.back(), base->losses.front()) << "no learning";
  struct Variant {
    int stage;
    bool offload = false;
    bool aggregation = false;
  };
  std::vector<float> aggregated;
  for (Variant v : {Variant{1}, Variant{2}, Variant{3}, Variant{3, true},
                    Variant{1, false, true}, Variant{2, false, true},
                    Variant{3, false, true}, Variant{3, true, true}}) {
    for (uint32_t k : {1u, 2u, 3u}) {
      if (v.aggregation && k == 3) continue;
      SCOPED_TRACE("stage " + std::to_string(v.stage) +
                   (v.offload ? "+offload" : "") +
                   (v.aggregation ? " server aggregation" : "") +
                   " K=" + std::to_string(k));
      MlpRun run = TestRun(v.stage);
      run.zero.offload_param_server = v.offload;
      run.zero.server_aggregation = v.aggregation;
      auto fleet = engine::StartTestFleet(k, {});
      ASSERT_TRUE(fleet.ok()) << fleet.status();
      auto got = TrainMlp(run, world, fleet->get());
      ASSERT_TRUE(got.ok()) << got.status();
      if (!v.aggregation) {
        EXPECT_EQ(engine::FirstDifference(got->params, base->params), -1);
        EXPECT_EQ(got->losses, base->losses);
        continue;
      }
      if (aggregated.empty()) aggregated = got->params;
      EXPECT_EQ(engine::FirstDifference(got->params, aggregated), -1);
    }
  }
  double worst = 0;
  for (size_t i = 0; i < aggregated.size(); ++i) {
    worst = std::max(worst, std::abs(double(aggregated[i]) - base->params[i]));
  }
  std::printf("W=%d: server aggregation vs reduction, max |diff| %.3g\n", world,
              worst);
  if (world == 1) {
    EXPECT_EQ(engine::FirstDifference(aggregated, base->params), -1);
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, MlpEngineTest, ::testing::Values(1, 2));

}  // namespace
}  // namespace zeroshard::mlp
