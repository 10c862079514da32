// Mixed precision in the ZeRO engine (ZeroOptions::precision), with W ranks
// as threads and real shard servers:
//   * fp16 with dynamic loss scaling: the run's loss-scale trajectory has an
//     overflow absorbed by hysteresis, an overflow that halves the scale and
//     a growth after loss_scale_window clean steps; stages 0, 1, 2, 3 and
//     3 + offload_param=server give the same parameter bits, losses, scales
//     and skipped steps for every server count;
//   * bf16: the same, with no loss scaling; its rounding changes the result
//     (it differs from fp32's; how much is printed);
//   * server-side aggregation in fp16 skips the same steps with the same
//     scales (the servers' overflow flag) and ends within 1e-2 of the
//     update of reduction among workers;
//   * stage 0 counts its fp32 master copy with the optimizer: 12Ψ bytes.
// The arithmetic against PyTorch is reference_test.cc's.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/testing.h"

namespace zeroshard::engine {
namespace {

using engine::Precision;

// The scale starts high enough that the first steps overflow fp16; a
// window of 3 grows it again, so it keeps moving.
train::TrainSpec Spec(Precision precision, int stage, bool offload) {
  train::TrainSpec s = TinySpec(stage, offload, "mixed_precision_test");
  s.steps = 12;
  s.zero.precision = precision;
  s.zero.loss_scaler.dynamic = true;
  s.zero.loss_scaler.initial_scale = 1 << 18;
  s.zero.loss_scaler.scale_window = 3;
  s.zero.loss_scaler.hysteresis = 2;
  return s;
}

struct Trajectory {
  int skipped = 0, kept = 0, halved = 0, grew = 0;
};

Trajectory Describe(const train::TrainResult& r, const char* what) {
  Trajectory t;
  for (const StepStats& s : r.stats) {
    std::printf("%s: %s\n", what, DescribeStepStats(s).c_str());
    t.skipped += s.skipped;
    t.kept += s.skipped && s.next_loss_scale == s.loss_scale;
    t.halved += s.next_loss_scale < s.loss_scale;
    t.grew += s.next_loss_scale > s.loss_scale;
  }
  return t;
}

// Same parameter bits, micro-batch losses, scales and skips on every rank.
void ExpectSameRun(const std::vector<train::TrainResult>& got,
                   const std::vector<train::TrainResult>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t r = 0; r < got.size(); ++r) {
    EXPECT_EQ(FirstDifference(got[r].params, want[0].params), -1)
        << "rank " << r;
    ASSERT_EQ(got[r].stats.size(), want[r].stats.size());
    for (size_t s = 0; s < got[r].stats.size(); ++s) {
      EXPECT_EQ(got[r].micro_losses[s], want[r].micro_losses[s])
          << "rank " << r << " step " << s;
      EXPECT_EQ(got[r].stats[s].loss_scale, want[r].stats[s].loss_scale);
      EXPECT_EQ(got[r].stats[s].skipped, want[r].stats[s].skipped);
    }
  }
}

struct Variant {
  int stage;
  bool offload;
  uint32_t servers;
};

void CheckStages(Precision precision, int world,
                 const std::vector<train::TrainResult>& base) {
  for (Variant v :
       {Variant{1, false, 1}, Variant{2, false, 2}, Variant{3, false, 1},
        Variant{3, false, 2}, Variant{3, true, 2}}) {
    SCOPED_TRACE("stage " + std::to_string(v.stage) +
                 (v.offload ? "+offload" : "") +
                 " K=" + std::to_string(v.servers));
    auto got =
        RunInProcess(Spec(precision, v.stage, v.offload), world, v.servers);
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectSameRun(*got, base);
  }
}

class MixedPrecisionTest : public ::testing::TestWithParam<int> {};

TEST_P(MixedPrecisionTest, Fp16LossScalingIsTheSameOnEveryStage) {
  const int world = GetParam();
  auto base = RunInProcess(Spec(Precision::kFp16, 0, false), world, 0);
  ASSERT_TRUE(base.ok()) << base.status();
  const Trajectory t = Describe((*base)[0], "fp16 stage 0");
  EXPECT_GT(t.kept, 0) << "no overflow was absorbed by hysteresis";
  EXPECT_GT(t.halved, 0) << "the scale never halved";
  EXPECT_GT(t.grew, 0) << "the scale never grew";
  EXPECT_LT(t.skipped, static_cast<int>((*base)[0].stats.size()) / 2)
      << "most steps were skipped";
  for (size_t s = 0; s + 1 < (*base)[0].stats.size(); ++s) {
    EXPECT_EQ((*base)[0].stats[s].next_loss_scale,
              (*base)[0].stats[s + 1].loss_scale);
  }
  CheckStages(Precision::kFp16, world, *base);
}

TEST_P(MixedPrecisionTest, Bf16IsTheSameOnEveryStageAndNotFp32) {
  const int world = GetParam();
  auto base = RunInProcess(Spec(Precision::kBf16, 0, false), world, 0);
  ASSERT_TRUE(base.ok()) << base.status();
  const Trajectory t = Describe((*base)[0], "bf16 stage 0");
  EXPECT_EQ(t.skipped + t.halved + t.grew, 0);
  for (const StepStats& s : (*base)[0].stats) EXPECT_EQ(s.loss_scale, 1.0);
  auto fp32 = RunInProcess(Spec(Precision::kFp32, 0, false), world, 0);
  ASSERT_TRUE(fp32.ok()) << fp32.status();
  EXPECT_NE(FirstDifference((*base)[0].params, (*fp32)[0].params), -1)
      << "bf16 rounding changed nothing";
  const double rel = WorstUpdateRel(Spec(Precision::kBf16, 0, false),
                                    (*base)[0].params, (*fp32)[0].params);
  std::printf("W=%d bf16 vs fp32: worst diff/update %.3e\n", world, rel);
  CheckStages(Precision::kBf16, world, *base);
}

INSTANTIATE_TEST_SUITE_P(World, MixedPrecisionTest, ::testing::Values(1, 2),
                         [](const auto& info) {
                           return "W" + std::to_string(info.param);
                         });

TEST(MixedPrecision, ServerAggregationSkipsTheSameSteps) {
  const train::TrainSpec reduced = Spec(Precision::kFp16, 2, false);
  train::TrainSpec pushed = reduced;
  pushed.zero.server_aggregation = true;
  auto a = RunInProcess(reduced, 2, 2);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = RunInProcess(pushed, 2, 2);
  ASSERT_TRUE(b.ok()) << b.status();
  const Trajectory t = Describe((*b)[0], "fp16 aggregated");
  EXPECT_GT(t.skipped, 0);
  for (size_t s = 0; s < (*a)[0].stats.size(); ++s) {
    EXPECT_EQ((*b)[0].stats[s].loss_scale, (*a)[0].stats[s].loss_scale)
        << "step " << s;
    EXPECT_EQ((*b)[0].stats[s].skipped, (*a)[0].stats[s].skipped);
  }
  const double rel = WorstUpdateRel(reduced, (*b)[0].params, (*a)[0].params);
  std::printf("fp16 aggregated vs reduced: worst diff/update %.3e\n", rel);
  EXPECT_LE(rel, 1e-2);
}

TEST(MixedPrecision, StageZeroCountsItsMasterCopy) {
  auto got = RunInProcess(Spec(Precision::kBf16, 0, false), 1, 0);
  ASSERT_TRUE(got.ok()) << got.status();
  auto layout = gpt2::ParamLayout::Create(TinyConfig());
  ASSERT_TRUE(layout.ok());
  const uint64_t n = layout->num_params();
  const StepStats& s = (*got)[0].stats.back();
  EXPECT_EQ(s.param_bytes, 4 * n);
  EXPECT_EQ(s.optimizer_bytes, 12 * n);  // master, m, v
}

}  // namespace
}  // namespace zeroshard::engine
