// StepStats against the DESIGN table (shared/DESIGN.md), fp32 training
// (4-byte parameters and gradients; the fp32 parameters are their own
// master copy, so AdamW adds 8 bytes of moments). Ψ parameters, N = W ranks,
// gas = 1, checked within 5% on every rank:
//
//   model-state bytes per worker        collective bytes sent per step
//   stage 0   4Ψ + 4Ψ + 8Ψ = 16Ψ        all-reduce: 2·(N-1)/N·4Ψ
//   stage 1   4Ψ + 4Ψ      =  8Ψ        RS + AG:    2·(N-1)/N·4Ψ
//   stage 2   4Ψ + 4Ψ/N                 RS + AG:    2·(N-1)/N·4Ψ
//   stage 3   4Ψ/N + 4Ψ/N               AG (fwd) + AG (bwd) + RS: 3·(N-1)/N·4Ψ
//   3+offload 4Ψ/N (gradients only)     same as stage 3
//
// Counted: payload bytes of the engine's collectives (collective.h
// OpStats, equal to a ring's), including the tiny norm all-gather and the
// commit broadcast. Stage 3 gathers the final norm once per micro-batch
// (it stays live from forward's LM head to backward's), a saving of its
// 2C elements. Also printed: bytes pushed to and gathered from the servers
// (4Ψ/N each for stages 1-3; offload gathers its part of every unit each
// time it is needed) and the peak live window.
#include <cstdio>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/zero/testing.h"

namespace zeroshard::zero {
namespace {

constexpr double kTolerance = 0.05;

TrainSpec Spec(int stage, bool offload) {
  TrainSpec s = TinySpec(stage, offload, "stats_test");
  s.zero.gradient_accumulation_steps = 1;
  s.zero.reduce_bucket_size = 12000;  // buckets split evenly over 2 and 4
  s.steps = 2;
  return s;
}

void ExpectNear(const char* what, double got, double want) {
  std::printf("    %-22s %12.0f  formula %12.0f  ratio %.4f\n", what, got, want,
              got / want);
  EXPECT_NEAR(got / want, 1.0, kTolerance) << what;
}

class StatsTest : public ::testing::TestWithParam<int> {};

TEST_P(StatsTest, BytesHeldAndSentMatchTheDesignTable) {
  const int n = GetParam();
  auto layout = gpt2::ParamLayout::Create(TinyConfig());
  ASSERT_TRUE(layout.ok());
  const double psi = static_cast<double>(layout->num_params());
  const double ring = (n - 1.0) / n * 4 * psi;  // one RS or AG, bytes sent
  struct Row {
    int stage;
    bool offload;
    double state, sent;
  };
  const Row rows[] = {
      {0, false, 16 * psi, 2 * ring},
      {1, false, 8 * psi, 2 * ring},
      {2, false, 4 * psi + 4 * psi / n, 2 * ring},
      {3, false, 8 * psi / n, 3 * ring},
      {3, true, 4 * psi / n, 3 * ring},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE("stage " + std::to_string(row.stage) +
                 (row.offload ? "+offload" : ""));
    auto got = RunInProcess(Spec(row.stage, row.offload), n, 2);
    ASSERT_TRUE(got.ok()) << got.status();
    for (int r = 0; r < n; ++r) {
      const StepStats& s = (*got)[r].stats.back();
      std::printf("N=%d stage %d%s rank %d (Ψ=%.0f): %s\n", n, row.stage,
                  row.offload ? "+offload" : "", r, psi,
                  DescribeStepStats(s).c_str());
      ExpectNear("model-state bytes", s.model_state_bytes(), row.state);
      ExpectNear("collective bytes sent", s.collective_bytes_sent(), row.sent);
      if (row.stage > 0) {
        ExpectNear("server push bytes", s.server_push.bytes_sent, 4 * psi / n);
      }
      if (row.stage == 3) {
        // At most two blocks (one in use, one prefetched) and the head.
        EXPECT_LE(s.peak_live_param_bytes,
                  4 * (2 * layout->LayerRange(0).size() +
                       layout->EmbeddingRange().size() +
                       layout->FinalNormRange().size()));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Workers, StatsTest, ::testing::Values(2, 4),
                         [](const auto& info) {
                           return "N" + std::to_string(info.param);
                         });

}  // namespace
}  // namespace zeroshard::zero
