// Server-side aggregation (ZeroOptions::server_aggregation): ranks push
// every micro-batch's gradient and the real shard servers sum the W·gas
// contributions. For W ∈ {1, 2, 4} ranks (threads) and real servers:
//   * stages 1, 2, 3 and 3 + offload_param=server give the same bits for a
//     given K (only placement differs), with and without overlap, and a
//     rerun gives the same bits;
//   * against workers reducing among themselves (stage 2, same data): the
//     micro-batch losses agree to 1e-4 relative and each tensor's
//     difference is <= 1e-2 of its total update (reference_test.cc's
//     metric); the sums associate differently, so bits may differ;
//   * no gradient collective runs, each rank pushes 4·Ψ·gas bytes per step
//     and keeps no gradient accumulator; the servers' ledgers count at
//     least W·gas contributions per step;
//   * with checkpoints, a server killed (SIGKILL) mid-run rolls the job
//     back and it ends with the bits of an uninterrupted run.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/engine/testing.h"

namespace zeroshard::engine {
namespace {

train::TrainSpec Spec(int stage, bool offload, bool aggregate) {
  train::TrainSpec s = TinySpec(stage, offload, "aggregation_test");
  s.zero.server_aggregation = aggregate;
  return s;
}

class AggregationTest : public ::testing::TestWithParam<int> {};

TEST_P(AggregationTest, MatchesReductionAmongWorkersOnEveryStage) {
  const int world = GetParam();
  auto reduced = RunInProcess(Spec(2, false, false), world, 2);
  ASSERT_TRUE(reduced.ok()) << reduced.status();
  auto first = RunInProcess(Spec(2, false, true), world, 2);
  ASSERT_TRUE(first.ok()) << first.status();
  const train::TrainSpec spec = Spec(2, false, true);
  const std::vector<float>& want = (*first)[0].params;
  const int gas = spec.zero.gradient_accumulation_steps;
  const uint64_t psi = want.size();

  // Against reduction among workers.
  const double rel = WorstUpdateRel(spec, want, (*reduced)[0].params);
  std::printf(
      "W=%d: aggregated vs reduced: worst diff/update %.2e, %s\n", world, rel,
      FirstDifference(want, (*reduced)[0].params) == -1 ? "bit-identical"
                                                        : "bits differ");
  EXPECT_LE(rel, 1e-2);
  int clipped = 0;
  for (int r = 0; r < world; ++r) {
    const train::TrainResult& got = (*first)[r];
    EXPECT_EQ(FirstDifference(got.params, want), -1) << "rank " << r;
    for (size_t s = 0; s < got.micro_losses.size(); ++s) {
      for (size_t m = 0; m < got.micro_losses[s].size(); ++m) {
        const float a = got.micro_losses[s][m];
        const float b = (*reduced)[r].micro_losses[s][m];
        EXPECT_LE(std::fabs(a - b), 1e-4 * std::fabs(b))
            << "rank " << r << " step " << s << " micro " << m;
      }
      const StepStats& st = got.stats[s];
      EXPECT_EQ(st.reduce_scatter.ops + st.all_reduce.ops, 0u);
      EXPECT_EQ(st.server_push.bytes_sent, 4 * psi * gas);
      EXPECT_EQ(st.grad_bytes, 0u);
      EXPECT_NEAR(st.grad_norm, (*reduced)[r].stats[s].grad_norm,
                  1e-4 * (*reduced)[r].stats[s].grad_norm);
      clipped += st.clip_coef < 1.0f;
    }
  }
  EXPECT_GT(clipped, 0) << "clipping never engaged";

  // Every stage (and overlap off) gives the same bits for a given K.
  struct Variant {
    int stage;
    bool offload;
    bool overlap;
    uint32_t servers;
  };
  for (Variant v : {Variant{1, false, true, 2}, Variant{3, false, true, 2},
                    Variant{3, true, true, 2}, Variant{2, false, false, 2},
                    Variant{2, false, true, 2}}) {
    SCOPED_TRACE("stage " + std::to_string(v.stage) +
                 (v.offload ? "+offload" : "") +
                 " overlap=" + std::to_string(v.overlap));
    train::TrainSpec s = Spec(v.stage, v.offload, true);
    s.zero.overlap_comm = v.overlap;
    auto got = RunInProcess(s, world, v.servers);
    ASSERT_TRUE(got.ok()) << got.status();
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(FirstDifference((*got)[r].params, want), -1) << "rank " << r;
    }
  }
  // Other server counts: the servers' norm partials group differently, so
  // only the clip coefficient's last bits could move.
  for (uint32_t k : {1u, 3u}) {
    auto got = RunInProcess(spec, world, k);
    ASSERT_TRUE(got.ok()) << got.status();
    const double d = WorstUpdateRel(spec, (*got)[0].params, want);
    std::printf("W=%d K=%u vs K=2: diff/update %.2e (%s)\n", world, k, d,
                FirstDifference((*got)[0].params, want) == -1 ? "same bits"
                                                              : "bits differ");
    EXPECT_LE(d, 1e-5);
  }
}

TEST(AggregationTest, ServersSumEveryContribution) {
  const int world = 2;
  const train::TrainSpec spec = Spec(1, false, true);
  auto fleet = StartTestFleet(2, {});
  ASSERT_TRUE(fleet.ok()) << fleet.status();
  auto got = RunInProcessOn(spec, world, fleet->get());
  ASSERT_TRUE(got.ok()) << got.status();
  ClientOptions o;
  o.addresses = (*fleet)->addresses();
  auto client = ShardClient::Connect(o);
  ASSERT_TRUE(client.ok()) << client.status();
  auto stats = (*client)->Stats(/*ledger=*/true);
  ASSERT_TRUE(stats.ok()) << stats.status();
  const uint64_t want =
      static_cast<uint64_t>(world) *
      static_cast<uint64_t>(spec.zero.gradient_accumulation_steps);
  for (const v1::GetStatsResponse& s : *stats) {
    ASSERT_EQ(s.ledger_size(), spec.steps);
    for (const auto& entry : s.ledger()) {
      EXPECT_GE(entry.contributions(), want) << "step " << entry.step();
    }
  }
  // A rerun on fresh servers gives the same bits.
  auto again = RunInProcess(spec, world, 2);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(FirstDifference((*again)[0].params, (*got)[0].params), -1);
}

TEST(AggregationTest, ServerKilledMidRunEndsWithTheSameBits) {
  train::TrainSpec spec = Spec(2, false, true);
  spec.steps = 16;
  spec.zero.checkpoint_interval = 4;
  spec.zero.recovery_timeout_seconds = 60;
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp ? tmp : "/tmp", "/aggregation");
  auto run = [&](const std::string& name,
                 bool kill) -> absl::StatusOr<std::vector<train::TrainResult>> {
    auto fleet =
        StartTestFleet(2, {absl::StrCat("--checkpoint_dir=", dir, "-", name)});
    if (!fleet.ok()) return fleet.status();
    std::atomic<bool> killed{false};
    InProcessHooks hooks;
    hooks.on_step = [&](int rank, const StepStats& st,
                        collective::InProcessHub*) {
      if (kill && rank == 0 && st.step == 10 && !killed.exchange(true)) {
        EXPECT_TRUE((*fleet)->Restart(1).ok());
      }
    };
    auto got = RunInProcessWith(spec, 2, fleet->get(), hooks);
    if (kill) {
      EXPECT_TRUE(killed);
    }
    return got;
  };
  auto reference = run("reference", false);
  ASSERT_TRUE(reference.ok()) << reference.status();
  auto killed = run("killed", true);
  ASSERT_TRUE(killed.ok()) << killed.status();
  std::printf("server 1 killed after step 10: %d roll back(s)\n",
              (*killed)[0].rollbacks);
  EXPECT_GE((*killed)[0].rollbacks, 1);
  EXPECT_EQ(FirstDifference((*killed)[0].params, (*reference)[0].params), -1);
  ASSERT_EQ((*killed)[0].micro_losses.size(),
            (*reference)[0].micro_losses.size());
  for (size_t s = 0; s < (*killed)[0].micro_losses.size(); ++s) {
    EXPECT_EQ((*killed)[0].micro_losses[s], (*reference)[0].micro_losses[s])
        << "step " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(World, AggregationTest, ::testing::Values(1, 2, 4),
                         [](const auto& info) {
                           return "W" + std::to_string(info.param);
                         });

}  // namespace
}  // namespace zeroshard::engine
