#include "worker/engine/lr_schedule.h"

#include "gtest/gtest.h"

namespace zeroshard::engine {
namespace {

// Expected values are worked out by hand from the formulas in
// deepspeed/runtime/lr_schedules.py (see lr_schedule.h); the transcendental
// ones were evaluated once in Python and pasted here. EXPECT_DOUBLE_EQ
// allows 4 ulps.

TEST(LrScheduleTest, ConstantIgnoresStep) {
  LrSchedule s;
  s.lr = 3e-4;
  EXPECT_EQ(LearningRate(s, 0), 3e-4);
  EXPECT_EQ(LearningRate(s, 123456), 3e-4);
}

TEST(LrScheduleTest, WarmupLinear) {
  LrSchedule s;
  s.type = LrScheduleType::kWarmupLR;
  s.warmup_min_lr = 0.0;
  s.warmup_max_lr = 0.01;
  s.warmup_num_steps = 10;
  s.warmup_type = WarmupType::kLinear;
  EXPECT_EQ(LearningRate(s, -1), 0.0);  // before the first step: min
  EXPECT_EQ(LearningRate(s, 0), 0.0);
  EXPECT_DOUBLE_EQ(LearningRate(s, 5), 0.005);  // 0.01 * 5/10
  EXPECT_DOUBLE_EQ(LearningRate(s, 9), 0.009);
  EXPECT_EQ(LearningRate(s, 10), 0.01);  // warmup end: flat from here
  EXPECT_EQ(LearningRate(s, 100000), 0.01);
}

TEST(LrScheduleTest, WarmupLog) {
  LrSchedule s;
  s.type = LrScheduleType::kWarmupLR;
  s.warmup_min_lr = 1e-4;
  s.warmup_max_lr = 1e-3;
  s.warmup_num_steps = 100;
  s.warmup_type = WarmupType::kLog;
  EXPECT_EQ(LearningRate(s, 0), 1e-4);  // ln(1) = 0
  // ln(10)/ln(100) = 1/2: halfway.
  EXPECT_DOUBLE_EQ(LearningRate(s, 9), 5.5e-4);
  // ln(100)/ln(100) = 1 at the last warmup step already.
  EXPECT_DOUBLE_EQ(LearningRate(s, 99), 1e-3);
  EXPECT_DOUBLE_EQ(LearningRate(s, 100), 1e-3);
  EXPECT_DOUBLE_EQ(LearningRate(s, 5000), 1e-3);
}

TEST(LrScheduleTest, WarmupStepsBelowTwoActAsTwo) {
  LrSchedule s;
  s.type = LrScheduleType::kWarmupLR;
  s.warmup_max_lr = 1.0;
  s.warmup_num_steps = 0;
  s.warmup_type = WarmupType::kLinear;
  EXPECT_EQ(EffectiveWarmupSteps(s), 2);
  EXPECT_EQ(LearningRate(s, 0), 0.0);
  EXPECT_EQ(LearningRate(s, 1), 0.5);
  EXPECT_EQ(LearningRate(s, 2), 1.0);
}

TEST(LrScheduleTest, WarmupDecayLinear) {
  LrSchedule s;
  s.type = LrScheduleType::kWarmupDecayLR;
  s.warmup_min_lr = 0.0;
  s.warmup_max_lr = 1.0;
  s.warmup_num_steps = 10;
  s.total_num_steps = 110;
  s.warmup_type = WarmupType::kLinear;
  EXPECT_EQ(LearningRate(s, 0), 0.0);
  EXPECT_EQ(LearningRate(s, 5), 0.5);   // mid-warmup
  EXPECT_EQ(LearningRate(s, 10), 1.0);  // warmup end: (110-10)/100
  EXPECT_EQ(LearningRate(s, 60), 0.5);  // mid-decay: 50/100
  EXPECT_EQ(LearningRate(s, 109), 0.01);
  EXPECT_EQ(LearningRate(s, 110), 0.0);  // end
  EXPECT_EQ(LearningRate(s, 500), 0.0);  // past the end: clamped at 0
}

TEST(LrScheduleTest, WarmupDecayFloorsAtMinLr) {
  LrSchedule s;
  s.type = LrScheduleType::kWarmupDecayLR;
  s.warmup_min_lr = 0.25;
  s.warmup_max_lr = 1.25;
  s.warmup_num_steps = 10;
  s.total_num_steps = 10;  // no decay span: max(1, T - W) = 1
  s.warmup_type = WarmupType::kLinear;
  EXPECT_EQ(LearningRate(s, 10), 0.25);
  EXPECT_EQ(LearningRate(s, 11), 0.25);
}

TEST(LrScheduleTest, WarmupCosine) {
  LrSchedule s;
  s.type = LrScheduleType::kWarmupCosineLR;
  s.lr = 1e-3;
  s.warmup_num_steps = 10;
  s.total_num_steps = 110;
  s.warmup_min_ratio = 0.1;
  s.cos_min_ratio = 0.01;
  s.warmup_type = WarmupType::kLinear;
  EXPECT_DOUBLE_EQ(LearningRate(s, 0), 1e-4);    // lr * wmr
  EXPECT_DOUBLE_EQ(LearningRate(s, 5), 5.5e-4);  // 0.1 + 0.5 * 0.9
  // First decay step: (1 + cos(pi/100))/2 = 0.9997532801828658.
  EXPECT_DOUBLE_EQ(LearningRate(s, 10), 0.0009997557473810372);
  // Mid-decay: cos(pi/2) = 0, ratio 0.01 + 0.99/2.
  EXPECT_DOUBLE_EQ(LearningRate(s, 59), 5.05e-4);
  // cos_min_ratio is reached at T - 1 ...
  EXPECT_DOUBLE_EQ(LearningRate(s, 109), 1e-5);
  // ... and DeepSpeed's cosine rises again past it: (1 + cos(1.01 pi))/2.
  EXPECT_DOUBLE_EQ(LearningRate(s, 110), 1.024425261896286e-05);
  EXPECT_GT(LearningRate(s, 120), LearningRate(s, 110));
}

TEST(LrScheduleTest, WarmupCosineLogWarmup) {
  LrSchedule s;
  s.type = LrScheduleType::kWarmupCosineLR;
  s.lr = 1e-3;
  s.warmup_num_steps = 10;
  s.total_num_steps = 100;
  s.warmup_min_ratio = 0.1;
  s.warmup_type = WarmupType::kLog;
  EXPECT_DOUBLE_EQ(LearningRate(s, 0), 1e-4);
  // 0.1 + 0.9 * ln(4)/ln(10).
  EXPECT_DOUBLE_EQ(LearningRate(s, 3), 0.000641853992195166);
}

// DeepSpeed's engine trains update k at iteration k - 1's rate: its
// scheduler is made at iteration -1, whose constructor writes get_lr() of
// -1 into the optimizer (WarmupLR: warmup_min_lr; WarmupCosineLR: 0), and it
// steps after each optimizer step (runtime/engine.py, _take_model_step).
// The rates below are what it applies to updates 0, 1, 2, ...
TEST(LrScheduleTest, UpdatesTrainAtTheIterationBefore) {
  LrSchedule warm;
  warm.type = LrScheduleType::kWarmupLR;
  warm.warmup_min_lr = 1e-3;
  warm.warmup_max_lr = 1e-2;
  warm.warmup_num_steps = 4;
  warm.warmup_type = WarmupType::kLinear;
  const double warm_rates[] = {1e-3, 1e-3, 3.25e-3, 5.5e-3, 7.75e-3, 1e-2};
  for (int k = 0; k < 6; ++k) {
    EXPECT_DOUBLE_EQ(UpdateLearningRate(warm, k), warm_rates[k]) << k;
  }
  LrSchedule decay = warm;
  decay.type = LrScheduleType::kWarmupDecayLR;
  decay.warmup_min_lr = 0.0;
  decay.warmup_max_lr = 1.0;
  decay.total_num_steps = 8;
  // Iterations -1, 0, ..., 6: min, then 0/4 .. 3/4, then (8 - i) / 4.
  const double decay_rates[] = {0, 0, 0.25, 0.5, 0.75, 1.0, 0.75, 0.5};
  for (int k = 0; k < 8; ++k) {
    EXPECT_DOUBLE_EQ(UpdateLearningRate(decay, k), decay_rates[k]) << k;
  }
  LrSchedule cosine;
  cosine.type = LrScheduleType::kWarmupCosineLR;
  cosine.lr = 1e-2;
  cosine.warmup_num_steps = 3;
  cosine.warmup_type = WarmupType::kLinear;
  cosine.warmup_min_ratio = 0.1;
  cosine.total_num_steps = 8;
  EXPECT_EQ(UpdateLearningRate(cosine, 0), 0.0);  // get_lr() at -1: [0.0]
  EXPECT_DOUBLE_EQ(UpdateLearningRate(cosine, 1), 1e-3);  // ratio 0.1
  EXPECT_DOUBLE_EQ(UpdateLearningRate(cosine, 2), 4e-3);  // 0.1 + 0.9/3
  LrSchedule constant;
  constant.lr = 3e-4;
  EXPECT_EQ(UpdateLearningRate(constant, 0), 3e-4);
}

}  // namespace
}  // namespace zeroshard::engine
