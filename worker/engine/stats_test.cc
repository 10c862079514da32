// StepStats against the DESIGN table (shared/DESIGN.md) as
// worker/engine/zero_theory.h writes it, fp32 training (p = g = 4; the fp32
// parameters are their own master copy, so AdamW adds K = 8 bytes of
// moments). Ψ parameters, N = W ranks, gas = 1, checked within 5% on every
// rank:
//
//   model-state bytes per worker        collective bytes sent per step
//   stage 0   4Ψ + 4Ψ + 8Ψ = 16Ψ        all-reduce: 2·(N-1)/N·4Ψ
//   stage 1   4Ψ + 4Ψ      =  8Ψ        RS + AG:    2·(N-1)/N·4Ψ
//   stage 2   4Ψ + 4Ψ/N                 RS + AG:    2·(N-1)/N·4Ψ
//   stage 3   4(Ψ-Ψp)/N + 4Ψ/N + 4Ψp    AG (fwd) + AG (bwd) + RS:
//                                                   (N-1)/N·4·(3Ψ - 2Ψp)
//   3+offload 4Ψ/N + 4Ψp                same as stage 3
//
// Ψp: the persistent units' elements (stage3_param_persistence_threshold;
// 0 unless a row sets it). The recorded model-state bytes leave out the
// live window (recorded as peak_live_param_bytes), so `live` is 0 here.
// Counted: payload bytes of the engine's collectives (collective.h
// OpStats, equal to a ring's), including the tiny norm all-gather and the
// commit broadcast. Stage 3 gathers the final norm once per micro-batch
// (it stays live from forward's LM head to backward's), a saving of its
// 2C elements. Also printed: bytes pushed to and gathered from the servers
// (4Ψ/N each for stages 1-3; offload gathers its part of every unit each
// time it is needed) and the peak live window.
//
// Persistence is also checked exactly against the same run with threshold
// 0: the persistent units are never all-gathered (the all-gather bytes of
// the embeddings twice and the final norm once fewer per micro-batch),
// never live, and kept whole (param_bytes and the refresh's server bytes
// grow by exactly their size less this rank's part).
#include <cstdio>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/testing.h"
#include "worker/engine/zero_plan.h"
#include "worker/engine/zero_theory.h"
#include "worker/gpt2/engine_model.h"

namespace zeroshard::engine {
namespace {

constexpr double kTolerance = 0.05;

train::TrainSpec Spec(int stage, bool offload) {
  train::TrainSpec s = TinySpec(stage, offload, "stats_test");
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

// Bytes rank r sends all-gathering `unit` among n ranks (in-process
// communicators are flat: its part to each of the n - 1 others), whether
// the unit goes alone or with others in one AllGatherMany.
uint64_t AllGatherBytes(const Range& unit, int n, int r) {
  return 4 * static_cast<uint64_t>(n - 1) *
         PartOf(unit, n, r, kTestAlignment).size();
}

class StatsTest : public ::testing::TestWithParam<int> {};

TEST_P(StatsTest, BytesHeldAndSentMatchTheDesignTable) {
  const int n = GetParam();
  auto layout = gpt2::ParamLayout::Create(TinyConfig());
  ASSERT_TRUE(layout.ok());
  auto units = gpt2::EngineLayout(TinyConfig());
  ASSERT_TRUE(units.ok());
  const double psi = static_cast<double>(layout->num_params());
  struct Row {
    int stage;
    bool offload;
    uint64_t threshold = 0;
  };
  // 3000: the embeddings (2560) and the final norm (64) are persistent.
  for (const Row& row :
       {Row{0, false}, Row{1, false}, Row{2, false}, Row{3, false},
        Row{3, true}, Row{3, false, 3000}, Row{3, true, 3000}}) {
    SCOPED_TRACE("stage " + std::to_string(row.stage) +
                 (row.offload ? "+offload" : "") +
                 " threshold=" + std::to_string(row.threshold));
    train::TrainSpec spec = Spec(row.stage, row.offload);
    spec.zero.stage3_param_persistence_threshold = row.threshold;
    engine::ModelStateInputs in;
    in.num_params = psi;
    in.num_workers = n;
    in.param_bytes = 4;
    in.grad_bytes = 4;
    in.optimizer_bytes = 8;
    in.persistent_params =
        static_cast<double>(PersistentElements(*units, row.threshold));
    const double state =
        engine::WorkerModelStateBytes(row.stage, row.offload, in);
    const double sent = engine::CommBytesPerStep(
        row.stage, psi, n, engine::CommModel::kRing, 4, in.persistent_params);
    auto got = RunInProcess(spec, n, 2);
    ASSERT_TRUE(got.ok()) << got.status();
    for (int r = 0; r < n; ++r) {
      const StepStats& s = (*got)[r].stats.back();
      std::printf(
          "N=%d stage %d%s threshold %llu rank %d (Ψ=%.0f Ψp=%.0f): "
          "%s\n",
          n, row.stage, row.offload ? "+offload" : "",
          static_cast<unsigned long long>(row.threshold), r, psi,
          in.persistent_params, DescribeStepStats(s).c_str());
      ExpectNear("model-state bytes", s.model_state_bytes(), state);
      ExpectNear("collective bytes sent", s.collective_bytes_sent(), sent);
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

// Persistent units against the same run without: exact differences.
TEST_P(StatsTest, PersistentUnitsAreKeptWholeAndNeverGathered) {
  const int n = GetParam();
  auto layout = gpt2::EngineLayout(TinyConfig());
  ASSERT_TRUE(layout.ok());
  const uint64_t psi = layout->num_params();
  for (bool offload : {false, true}) {
    // Every unit prefetched at the first need: the peak live window is
    // every unit that is not persistent.
    train::TrainSpec spec = Spec(3, offload);
    spec.zero.stage3_prefetch_units = TinyConfig().num_layers + 2;
    auto none = RunInProcess(spec, n, 2);
    ASSERT_TRUE(none.ok()) << none.status();
    // 3000: embeddings and final norm; psi: every unit.
    for (uint64_t threshold : {uint64_t{3000}, psi}) {
      SCOPED_TRACE(std::string(offload ? "offload" : "no offload") +
                   " threshold=" + std::to_string(threshold));
      spec.zero.stage3_param_persistence_threshold = threshold;
      auto some = RunInProcess(spec, n, 2);
      ASSERT_TRUE(some.ok()) << some.status();
      // Per persistent unit: the all-gather bytes saved per micro-batch (its
      // uses in the need schedule: the embeddings and blocks twice, the final
      // norm once), the bytes kept (whole less this rank's part; no part
      // with offload) and the server bytes added (whole once per step less
      // this rank's part once, or with offload once per use).
      const uint64_t psi_p = PersistentElements(*layout, threshold);
      std::vector<uint64_t> gathered(n, 0);
      std::vector<int64_t> kept(n, 0), fetched(n, 0);
      for (size_t i = 0; i < layout->units.size(); ++i) {
        const Range& u = layout->units[i];
        if (!IsPersistent(u, threshold)) continue;
        // Forward and backward each gather a unit once, except the final
        // norm: live from forward's LM head to backward's.
        const int uses = i + 1 == layout->units.size() ? 1 : 2;
        const int64_t whole = 4 * static_cast<int64_t>(u.size());
        for (int r = 0; r < n; ++r) {
          const int64_t part =
              4 * static_cast<int64_t>(PartOf(u, n, r, kTestAlignment).size());
          kept[r] += whole - (offload ? 0 : part);
          gathered[r] += uses * AllGatherBytes(u, n, r);
          fetched[r] += whole - (offload ? uses : 1) * part;
        }
      }
      auto diff = [](uint64_t a, uint64_t b) {
        return static_cast<int64_t>(b) - static_cast<int64_t>(a);
      };
      for (int r = 0; r < n; ++r) {
        const StepStats& a = (*none)[r].stats.back();
        const StepStats& b = (*some)[r].stats.back();
        std::printf(
            "N=%d%s threshold %llu rank %d: all-gather bytes %llu -> %llu, "
            "param "
            "bytes %llu -> %llu, server gather bytes %llu -> %llu, peak "
            "live %llu -> %llu\n",
            n, offload ? " offload" : "",
            static_cast<unsigned long long>(threshold), r,
            static_cast<unsigned long long>(a.all_gather.bytes_sent),
            static_cast<unsigned long long>(b.all_gather.bytes_sent),
            static_cast<unsigned long long>(a.param_bytes),
            static_cast<unsigned long long>(b.param_bytes),
            static_cast<unsigned long long>(a.server_gather.bytes_received),
            static_cast<unsigned long long>(b.server_gather.bytes_received),
            static_cast<unsigned long long>(a.peak_live_param_bytes),
            static_cast<unsigned long long>(b.peak_live_param_bytes));
        EXPECT_EQ(a.all_gather.bytes_sent - b.all_gather.bytes_sent,
                  gathered[r])
            << r;
        EXPECT_EQ(diff(a.param_bytes, b.param_bytes), kept[r]) << r;
        EXPECT_EQ(diff(a.server_gather.bytes_received,
                       b.server_gather.bytes_received),
                  fetched[r])
            << r;
        EXPECT_EQ(a.peak_live_param_bytes, 4 * psi) << r;
        EXPECT_EQ(b.peak_live_param_bytes, 4 * (psi - psi_p)) << r;
        if (threshold == psi) {
          EXPECT_EQ(b.param_bytes, 4 * psi) << r;
        }
      }
      // The same bits.
      EXPECT_EQ(FirstDifference((*some)[0].params, (*none)[0].params), -1);
    }
  }
}

// stage3_max_reuse_distance (DeepSpeed's default 1e9) against 0: every unit
// forward released is needed again by backward within the distance, so it
// stays live and backward gathers nothing: each unit's all-gather bytes
// once per micro-batch instead of twice (the final norm is gathered once
// either way), the peak live window the whole model, the same bits.
TEST_P(StatsTest, UnitsNeededAgainWithinTheReuseDistanceAreGatheredOnce) {
  const int n = GetParam();
  auto layout = gpt2::EngineLayout(TinyConfig());
  ASSERT_TRUE(layout.ok());
  const uint64_t psi = layout->num_params();
  for (bool offload : {false, true}) {
    SCOPED_TRACE(offload ? "offload" : "no offload");
    train::TrainSpec spec = Spec(3, offload);
    auto released = RunInProcess(spec, n, 2);
    ASSERT_TRUE(released.ok()) << released.status();
    spec.zero.stage3_max_reuse_distance = 1000000000;
    auto kept = RunInProcess(spec, n, 2);
    ASSERT_TRUE(kept.ok()) << kept.status();
    for (int r = 0; r < n; ++r) {
      // Every unit's second gather saved, but the final norm's (last).
      uint64_t saved = 0;
      for (size_t i = 0; i + 1 < layout->units.size(); ++i) {
        saved += AllGatherBytes(layout->units[i], n, r);
      }
      const StepStats& a = (*released)[r].stats.back();
      const StepStats& b = (*kept)[r].stats.back();
      std::printf(
          "N=%d%s rank %d: all-gather bytes %llu (distance 0) -> %llu (1e9), "
          "peak live %llu -> %llu\n",
          n, offload ? " offload" : "", r,
          static_cast<unsigned long long>(a.all_gather.bytes_sent),
          static_cast<unsigned long long>(b.all_gather.bytes_sent),
          static_cast<unsigned long long>(a.peak_live_param_bytes),
          static_cast<unsigned long long>(b.peak_live_param_bytes));
      EXPECT_EQ(a.all_gather.bytes_sent - b.all_gather.bytes_sent, saved) << r;
      EXPECT_EQ(b.peak_live_param_bytes, 4 * psi) << r;
      EXPECT_LT(a.peak_live_param_bytes, 4 * psi) << r;
    }
    EXPECT_EQ(FirstDifference((*kept)[0].params, (*released)[0].params), -1);
  }
}

INSTANTIATE_TEST_SUITE_P(Workers, StatsTest, ::testing::Values(2, 4),
                         [](const auto& info) {
                           return "N" + std::to_string(info.param);
                         });

}  // namespace
}  // namespace zeroshard::engine
