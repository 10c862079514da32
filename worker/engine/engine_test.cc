// Engine behaviour beyond the numbers: the overlap of gradient reduction
// with backward (an ORDER of events the engine records, never a duration),
// the skip of steps whose gradients are not finite, and the options the
// delayed update refuses.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "worker/engine/testing.h"
#include "worker/engine/zero_options.h"
#include "worker/io/model_file.h"

namespace zeroshard::engine {
namespace {

// With overlap_comm, the first bucket in reduction order (final norm and the
// last block) is issued from the gradient hook while backward still has the
// other blocks and the embeddings to do; without, every bucket is issued
// after backward returned.
TEST(EngineTest, OverlapIssuesEarlyBucketsBeforeBackwardEnds) {
  for (int stage : {0, 2, 3}) {
    for (bool overlap : {true, false}) {
      SCOPED_TRACE("stage " + std::to_string(stage) +
                   (overlap ? " overlap" : " no overlap"));
      train::TrainSpec spec = TinySpec(stage, false, "engine_test");
      spec.zero.overlap_comm = overlap;
      spec.steps = 1;
      auto got = RunInProcess(spec, 2, 1);
      ASSERT_TRUE(got.ok()) << got.status();
      for (int r = 0; r < 2; ++r) {
        const StepStats& s = (*got)[r].stats.back();
        const std::vector<double>& issued = s.bucket_issue_seconds;
        ASSERT_GE(issued.size(), 3u) << "want several buckets";
        int before = 0;
        for (double t : issued) before += t < s.backward_end_seconds;
        std::printf(
            "stage %d overlap %d rank %d: %d of %zu buckets issued "
            "before backward ended\n",
            stage, overlap, r, before, issued.size());
        if (overlap) {
          EXPECT_LT(issued[0], s.backward_end_seconds);
          EXPECT_LT(issued[1], s.backward_end_seconds);
        } else {
          EXPECT_EQ(before, 0);
        }
        for (size_t k = 1; k < issued.size(); ++k) {
          EXPECT_LE(issued[k - 1], issued[k]) << "issue order, bucket " << k;
        }
      }
    }
  }
}

// period_seconds runs from one step's end to the next's, so it counts what
// the caller does between steps; step_seconds does not. The first step has
// nothing before it: its period is its step time.
TEST(EngineTest, PeriodCountsWhatRunsBetweenSteps) {
  train::TrainSpec spec = TinySpec(0, false, "engine_test_period");
  spec.steps = 3;
  const double kPause = 0.05;  // seconds, after each step
  InProcessHooks hooks;
  hooks.on_step = [&](int, const StepStats&, collective::InProcessHub*) {
    std::this_thread::sleep_for(std::chrono::duration<double>(kPause));
  };
  auto got = RunInProcessWith(spec, 1, nullptr, hooks);
  ASSERT_TRUE(got.ok()) << got.status();
  const std::vector<StepStats>& stats = (*got)[0].stats;
  ASSERT_EQ(stats.size(), 3u);
  EXPECT_EQ(stats[0].period_seconds, stats[0].step_seconds);
  for (size_t i = 1; i < stats.size(); ++i) {
    std::printf("step %zu: step %.4f s, period %.4f s\n", i + 1,
                stats[i].step_seconds, stats[i].period_seconds);
    EXPECT_GE(stats[i].period_seconds, stats[i].step_seconds + kPause);
  }
}

bool SameOrBothNan(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, 4) == 0;
}

// A NaN weight makes every gradient non-finite: every step is skipped on
// every stage, the parameters stay as they were and no rate is used.
TEST(EngineTest, NonFiniteGradientsSkipTheUpdate) {
  train::TrainSpec base = TinySpec(0, false, "engine_test_skip");
  auto layout = gpt2::ParamLayout::Create(base.config);
  ASSERT_TRUE(layout.ok());
  std::vector<float> init =
      train::SeededGpt2Init(*layout, base.seed, base.init_std);
  init[layout->FinalNormRange().begin] = std::nanf("");
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path =
      std::string(tmp != nullptr ? tmp : "/tmp") + "/nan_init.bin";
  ASSERT_TRUE(io::WriteModelFile(path, *layout, init.data()).ok());
  for (int stage : {0, 1, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    train::TrainSpec spec = TinySpec(stage, false, "engine_test_skip");
    spec.init_file = path;
    spec.steps = 2;
    auto got = RunInProcess(spec, 2, 2);
    ASSERT_TRUE(got.ok()) << got.status();
    for (const train::TrainResult& r : *got) {
      for (const StepStats& s : r.stats) {
        EXPECT_TRUE(s.skipped);
        EXPECT_EQ(s.lr, 0.0);
      }
      EXPECT_EQ(r.stats.back().step, 2);
      ASSERT_EQ(r.params.size(), init.size());
      for (size_t i = 0; i < init.size(); ++i) {
        ASSERT_TRUE(SameOrBothNan(r.params[i], init[i])) << "index " << i;
      }
    }
  }
}

// The delayed update (delayed_update_from > 0) needs stage 1-2 without
// recovery and without server aggregation; each refusal names the reason.
TEST(EngineTest, DelayedUpdateRefusesWhatItCannotDelay) {
  ZeroOptions ok;
  ok.stage = 2;
  ok.delayed_update_from = 1;
  EXPECT_TRUE(ValidateZeroOptions(ok).ok());
  const struct {
    void (*spoil)(ZeroOptions*);
    const char* words;
  } bad[] = {
      {[](ZeroOptions* o) { o->delayed_update_from = -1; }, "must be >= 0"},
      {[](ZeroOptions* o) { o->stage = 3; }, "needs stage 1 or 2"},
      {[](ZeroOptions* o) { o->stage = 0; }, "needs stage 1 or 2"},
      {[](ZeroOptions* o) { o->checkpoint_interval = 5; },
       "needs checkpoint_interval = 0"},
      {[](ZeroOptions* o) { o->server_aggregation = true; },
       "cannot be used with server_aggregation"},
  };
  for (const auto& b : bad) {
    ZeroOptions o = ok;
    b.spoil(&o);
    const absl::Status s = ValidateZeroOptions(o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << b.words;
    EXPECT_TRUE(absl::StrContains(s.message(), "delayed_update_from"));
    EXPECT_TRUE(absl::StrContains(s.message(), b.words)) << s;
  }
}

// The delayed update commits behind the next step: a server lost mid-run
// (restarted empty; no recovery with the delay) must end the run with an
// error, not a hang or a silent success.
TEST(EngineTest, DelayedUpdateEndsWithAnErrorWhenAServerIsLost) {
  train::TrainSpec spec = TinySpec(2, false, "delayed_lost");
  spec.zero.delayed_update_from = 2;
  auto fleet = StartTestFleet(2, {});
  ASSERT_TRUE(fleet.ok()) << fleet.status();
  std::atomic<bool> restarted{false};
  InProcessHooks hooks;
  hooks.on_step = [&](int rank, const StepStats& st,
                      collective::InProcessHub*) {
    if (rank == 0 && st.step == 4 && !restarted.exchange(true)) {
      EXPECT_TRUE((*fleet)->Restart(1).ok());
    }
  };
  auto got = RunInProcessWith(spec, 2, fleet->get(), hooks);
  EXPECT_TRUE(restarted);
  ASSERT_FALSE(got.ok()) << "the run went on after a server lost its state";
  std::printf("delayed update, server lost: %s\n",
              got.status().ToString().c_str());
}

}  // namespace
}  // namespace zeroshard::engine
