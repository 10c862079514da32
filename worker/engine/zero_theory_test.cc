#include "worker/engine/zero_theory.h"

#include <cmath>

#include "gtest/gtest.h"

namespace zeroshard::engine {
namespace {

constexpr double kGB = 1e9;

// The ZeRO paper's example (figure 1): Ψ = 7.5B, N = 64, K = 12, mixed
// precision: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB.
TEST(ZeroTheoryTest, PaperExample) {
  ModelStateInputs in;
  in.num_params = 7.5e9;
  in.num_workers = 64;
  EXPECT_DOUBLE_EQ(ZeroPaperModelStateBytes(0, in), 120 * kGB);
  EXPECT_NEAR(ZeroPaperModelStateBytes(1, in) / kGB, 31.4, 0.05);
  EXPECT_NEAR(ZeroPaperModelStateBytes(2, in) / kGB, 16.6, 0.05);
  EXPECT_NEAR(ZeroPaperModelStateBytes(3, in) / kGB, 1.9, 0.05);
  // Exactly: 30 + 90/64, 15 + 105/64, 120/64.
  EXPECT_DOUBLE_EQ(ZeroPaperModelStateBytes(1, in), 31.40625 * kGB);
  EXPECT_DOUBLE_EQ(ZeroPaperModelStateBytes(2, in), 16.640625 * kGB);
  EXPECT_DOUBLE_EQ(ZeroPaperModelStateBytes(3, in), 1.875 * kGB);
  EXPECT_TRUE(std::isnan(ZeroPaperModelStateBytes(4, in)));
}

TEST(ZeroTheoryTest, WorkerBytesFollowTheZeroShardTable) {
  ModelStateInputs in;
  in.num_params = 1000;
  in.num_workers = 4;
  in.live_window_bytes = 300;
  EXPECT_EQ(WorkerModelStateBytes(0, false, in), 16000);       // 16Ψ
  EXPECT_EQ(WorkerModelStateBytes(1, false, in), 4000);        // 2Ψ + 2Ψ
  EXPECT_EQ(WorkerModelStateBytes(2, false, in), 2500);        // 2Ψ + 2Ψ/N
  EXPECT_EQ(WorkerModelStateBytes(3, false, in), 1000 + 300);  // 4Ψ/N + live
  EXPECT_EQ(WorkerModelStateBytes(3, true, in), 500 + 300);    // 2Ψ/N + live
  // offload_param only matters for stage 3.
  EXPECT_EQ(WorkerModelStateBytes(2, true, in), 2500);
  EXPECT_TRUE(std::isnan(WorkerModelStateBytes(-1, false, in)));
}

// Ψp = 200 persistent parameters: 2(Ψ - Ψp)/N + 2Ψ/N + live + 2Ψp.
TEST(ZeroTheoryTest, PersistentParametersAreNotPartitioned) {
  ModelStateInputs in;
  in.num_params = 1000;
  in.num_workers = 4;
  in.live_window_bytes = 300;
  in.persistent_params = 200;
  EXPECT_EQ(WorkerModelStateBytes(3, false, in), 400 + 500 + 300 + 400);
  EXPECT_EQ(WorkerModelStateBytes(3, true, in), 500 + 300 + 400);
  // Only stage 3 partitions parameters.
  EXPECT_EQ(WorkerModelStateBytes(2, false, in), 2500);
  // Every parameter persistent: stage 3 holds what stage 2 does, + live.
  in.persistent_params = in.num_params;
  in.live_window_bytes = 0;
  EXPECT_EQ(WorkerModelStateBytes(3, false, in),
            WorkerModelStateBytes(2, false, in));
}

TEST(ZeroTheoryTest, Fp32TrainingUsesFourByteElements) {
  ModelStateInputs in;
  in.num_params = 100;
  in.num_workers = 2;
  in.param_bytes = 4;
  in.grad_bytes = 4;
  EXPECT_EQ(WorkerModelStateBytes(1, false, in), 800);
  EXPECT_EQ(WorkerModelStateBytes(2, false, in), 600);
}

TEST(ZeroTheoryTest, ServerFleet) {
  // 12Ψ optimizer + 4Ψ accumulator + 2Ψ serving copy.
  EXPECT_EQ(ServerFleetModelStateBytes(1000, 12, 1, 2), 18000);
  // Server-side aggregation: 4Ψ more per extra slot.
  EXPECT_EQ(ServerFleetModelStateBytes(1000, 12, 3, 2), 26000);
  EXPECT_EQ(ServerFleetModelStateBytes(1000, 12, 1, 0), 16000);
}

TEST(ZeroTheoryTest, Communication) {
  const double psi = 1000;
  for (int stage : {0, 1, 2}) {
    EXPECT_EQ(CommElementsPerStep(stage, psi, 4, CommModel::kPaper), 2000);
    EXPECT_EQ(CommElementsPerStep(stage, psi, 4, CommModel::kRing), 1500);
  }
  EXPECT_EQ(CommElementsPerStep(3, psi, 4, CommModel::kPaper), 3000);
  EXPECT_EQ(CommElementsPerStep(3, psi, 4, CommModel::kRing), 2250);
  EXPECT_EQ(CommElementsPerStep(3, psi, 1, CommModel::kRing), 0);
  // Persistent parameters are not all-gathered (twice less per step).
  EXPECT_EQ(CommElementsPerStep(3, psi, 4, CommModel::kPaper, 100), 2800);
  EXPECT_EQ(CommElementsPerStep(3, psi, 4, CommModel::kRing, 100), 2100);
  EXPECT_EQ(CommElementsPerStep(2, psi, 4, CommModel::kPaper, 100), 2000);
  // Every parameter persistent: the reduce-scatter only.
  EXPECT_EQ(CommBytesPerStep(3, psi, 8, CommModel::kPaper, 4, psi), 4000);
  EXPECT_EQ(CommBytesPerStep(2, psi, 4, CommModel::kPaper, 2), 4000);
  EXPECT_EQ(CommBytesPerStep(3, psi, 8, CommModel::kPaper, 4), 12000);
  EXPECT_TRUE(std::isnan(CommElementsPerStep(4, psi, 4, CommModel::kPaper)));
}

}  // namespace
}  // namespace zeroshard::engine
