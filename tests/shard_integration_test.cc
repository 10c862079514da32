// End to end through real zeroshard-server processes on loopback: register,
// write initial weights, then several steps in which several clients push
// their slices of the gradient, one prepares and commits, and the gathered
// parameters must equal a single-process AdamW reference bit for bit.
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <thread>

#include "common/dtype.h"
#include "common/model_spec.h"
#include "gtest/gtest.h"
#include "tests/testing.h"

namespace zeroshard {
namespace {

using testing::ReferenceAdamW;

struct Case {
  uint32_t servers;
  uint32_t workers;
  uint32_t slots;  // contributions_per_step: > 1 = server-side aggregation
  v1::DType wire;  // gradient dtype on the wire
};

void RunTraining(const Case& c) {
  SCOPED_TRACE(::testing::Message()
               << "K=" << c.servers << " W=" << c.workers
               << " slots=" << c.slots << " wire=" << v1::DType_Name(c.wire));
  auto fleet = testing::StartFleet(c.servers);
  ASSERT_NE(fleet, nullptr);
  const v1::ModelSpec spec =
      testing::SmallSpec("integration", c.servers, 3, c.slots);
  std::vector<std::unique_ptr<ShardClient>> clients;
  for (uint32_t w = 0; w < c.workers; ++w) {
    clients.push_back(testing::Connect(*fleet));
    ASSERT_NE(clients.back(), nullptr);
    // Every worker registers: idempotent.
    ASSERT_TRUE(clients.back()->RegisterModel(spec).ok());
  }
  const PartitionPlan& plan = clients[0]->plan();
  const uint64_t total = plan.total();
  std::mt19937_64 rng(1234 + c.servers * 10 + c.workers);
  std::vector<float> init = testing::RandomVector(rng, total, 0.02f);
  ASSERT_TRUE(clients[0]->WriteParameters(Range{0, total}, init.data()).ok());
  ReferenceAdamW reference(spec, init);

  const float max_norm = 1.0f;
  for (uint64_t step = 0; step < 5; ++step) {
    // One full gradient per slot; with several slots the servers sum them
    // in slot order, so the reference does the same.
    std::vector<std::vector<float>> partials;
    for (uint32_t s = 0; s < c.slots; ++s) {
      std::vector<float> g = testing::RandomVector(rng, total, 0.5f);
      if (c.wire == v1::DTYPE_BF16) {
        // Make the values exactly representable so the reference sees what
        // the server sees.
        for (float& x : g) x = Bf16ToFp32(Fp32ToBf16(x));
      }
      partials.push_back(std::move(g));
    }
    std::vector<float> g = partials[0];
    for (uint32_t s = 1; s < c.slots; ++s) {
      for (uint64_t i = 0; i < total; ++i) g[i] += partials[s][i];
    }
    // Each worker pushes its slice of every slot, concurrently.
    std::vector<std::thread> threads;
    std::vector<absl::Status> results(c.workers);
    for (uint32_t w = 0; w < c.workers; ++w) {
      threads.emplace_back([&, w] {
        const Range slice = plan.WorkerSlice(c.workers, w);
        if (slice.empty()) return;
        for (uint32_t s = 0; s < c.slots; ++s) {
          PushId id{0, step, s, absl::StrCat("w", w, "/s", step, "/slot", s)};
          absl::Status st;
          if (c.wire == v1::DTYPE_BF16) {
            std::vector<uint16_t> wire(slice.size());
            ConvertFp32ToBf16(partials[s].data() + slice.begin, wire.data(),
                              slice.size());
            st = clients[w]->Push(slice, c.wire, wire.data(), id);
          } else {
            st = clients[w]->Push(slice, c.wire,
                                  partials[s].data() + slice.begin, id);
          }
          if (!st.ok()) {
            results[w] = st;
            return;
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    for (const auto& r : results) ASSERT_TRUE(r.ok()) << r;

    auto norm = clients[0]->Prepare(0, step);
    ASSERT_TRUE(norm.ok()) << norm.status();
    const double ref_sq = ReferenceAdamW::SumSquares(g);
    EXPECT_NEAR(norm->sum_squares, ref_sq, 1e-9 * ref_sq);
    EXPECT_FALSE(norm->overflow);
    const float clip =
        static_cast<float>(std::min(1.0, max_norm / (norm->norm() + 1e-6)));
    const double lr = 1e-3 * (step + 1);  // a changing schedule
    ASSERT_TRUE(clients[0]->Commit(0, step, clip, lr, false).ok());
    reference.Step(g, clip, lr);

    std::vector<float> got(total);
    uint64_t got_step = 0;
    ASSERT_TRUE(
        clients[c.workers - 1]
            ->Gather(Range{0, total}, v1::DTYPE_FP32, got.data(), &got_step)
            .ok());
    EXPECT_EQ(got_step, step + 1);
    const int64_t diff = testing::FirstBitDifference(got, reference.params());
    ASSERT_EQ(diff, -1) << "step " << step << " element " << diff << ": "
                        << got[diff] << " vs " << reference.params()[diff];
    // The bf16 serving copy is the rounded master.
    std::vector<uint16_t> served(total);
    ASSERT_TRUE(clients[0]
                    ->Gather(Range{0, total}, v1::DTYPE_BF16, served.data())
                    .ok());
    for (uint64_t i = 0; i < total; ++i) {
      ASSERT_EQ(served[i], Fp32ToBf16(got[i])) << i;
    }
  }
  // The ledger: every contribution received exactly once per step.
  auto stats = clients[0]->Stats();
  ASSERT_TRUE(stats.ok());
  uint64_t elements = 0;
  for (const auto& s : *stats) {
    EXPECT_EQ(s.step(), 5u);
    EXPECT_EQ(s.optimizer_steps(), 5u);
    EXPECT_EQ(s.duplicates_ignored(), 0u);
    elements += s.elements_applied();
  }
  EXPECT_EQ(elements, 5 * total * c.slots);
  EXPECT_TRUE(fleet->Stop(std::chrono::milliseconds(5000)).ok());
}

TEST(ShardIntegrationTest, OneServerOneWorker) {
  RunTraining({1, 1, 1, v1::DTYPE_FP32});
}

TEST(ShardIntegrationTest, TwoServersThreeWorkers) {
  RunTraining({2, 3, 1, v1::DTYPE_FP32});
}

TEST(ShardIntegrationTest, ThreeServersTwoWorkersBf16Wire) {
  RunTraining({3, 2, 1, v1::DTYPE_BF16});
}

TEST(ShardIntegrationTest, ServerSideAggregationOfTwoPartials) {
  RunTraining({2, 2, 2, v1::DTYPE_FP32});
}

// The commit ledger (GetStats with ledger): one entry per step applied or
// skipped, none for a retried commit; a restore drops the entries from
// the restored step on; the trainer state follows commits and restores.
TEST(ShardIntegrationTest, CommitLedgerFollowsCommitsAndRestores) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/ledger";
  mkdir(dir.c_str(), 0755);
  auto fleet =
      testing::StartFleet(2, {"--checkpoint_dir=" + dir + "/ckpt"}, dir);
  ASSERT_NE(fleet, nullptr);
  auto client = testing::Connect(*fleet);
  ASSERT_NE(client, nullptr);
  const v1::ModelSpec spec = testing::SmallSpec("ledger", 2);
  ASSERT_TRUE(client->RegisterModel(spec).ok());
  const uint64_t total = client->plan().total();
  std::mt19937_64 rng(77);
  const std::vector<float> g = testing::RandomVector(rng, total, 0.1f);
  auto step = [&](uint64_t epoch, uint64_t n, bool skip) {
    v1::TrainerState state;
    state.set_step(n + 1);
    absl::Status st =
        client->Push(Range{0, total}, v1::DTYPE_FP32, g.data(),
                     {epoch, n, 0, absl::StrCat("e", epoch, "/s", n)});
    if (st.ok()) st = client->Prepare(epoch, n).status();
    if (st.ok()) st = client->Commit(epoch, n, 1.0f, 1e-3, skip, &state);
    return st;
  };
  ASSERT_TRUE(step(0, 0, false).ok());
  ASSERT_TRUE(step(0, 1, false).ok());
  ASSERT_TRUE(client->Checkpoint(2, nullptr).ok());
  ASSERT_TRUE(step(0, 2, false).ok());
  ASSERT_TRUE(step(0, 3, true).ok());
  // A retried commit of the step just done adds nothing.
  ASSERT_TRUE(client->Commit(0, 3, 1.0f, 1e-3, true).ok());

  auto stats = client->Stats(/*ledger=*/true);
  ASSERT_TRUE(stats.ok()) << stats.status();
  for (const v1::GetStatsResponse& s : *stats) {
    EXPECT_EQ(s.step(), 4u);
    EXPECT_EQ(s.trainer_state().step(), 4u);
    EXPECT_FALSE(s.awaiting_restore());
    EXPECT_EQ(s.ledger_first_step(), 0u);
    ASSERT_EQ(s.ledger_size(), 4);
    uint64_t contributions = 0;
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(s.ledger(i).step(), uint64_t(i));
      EXPECT_EQ(s.ledger(i).epoch(), 0u);
      EXPECT_EQ(s.ledger(i).skipped(), i == 3);
      EXPECT_GE(s.ledger(i).contributions(), 1u);
      contributions += s.ledger(i).contributions();
    }
    EXPECT_EQ(contributions, s.contributions_applied());
  }
  auto plain = client->Stats();
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ((*plain)[0].ledger_size(), 0);
  EXPECT_EQ((*plain)[0].trainer_state().step(), 4u);

  // Back to step 2 in epoch 1: steps 2 and 3 leave the ledger; step 2
  // again comes back with the new epoch.
  auto restored = client->Restore(2, 1);
  ASSERT_TRUE(restored.ok()) << restored.status();
  stats = client->Stats(true);
  ASSERT_TRUE(stats.ok());
  for (const v1::GetStatsResponse& s : *stats) {
    EXPECT_EQ(s.step(), 2u);
    EXPECT_EQ(s.trainer_state().step(), restored->step());
    ASSERT_EQ(s.ledger_size(), 2);
    EXPECT_EQ(s.ledger(1).step(), 1u);
  }
  ASSERT_TRUE(step(1, 2, false).ok());
  stats = client->Stats(true);
  ASSERT_TRUE(stats.ok());
  for (const v1::GetStatsResponse& s : *stats) {
    ASSERT_EQ(s.ledger_size(), 3);
    EXPECT_EQ(s.ledger(2).step(), 2u);
    EXPECT_EQ(s.ledger(2).epoch(), 1u);
    EXPECT_EQ(s.trainer_state().step(), 3u);
  }
  EXPECT_TRUE(fleet->Stop(std::chrono::milliseconds(5000)).ok());
}

TEST(ShardIntegrationTest, SeededInitIsIndependentOfServerCount) {
  std::vector<std::vector<float>> results;
  for (uint32_t k : {1u, 3u}) {
    auto fleet = testing::StartFleet(k);
    ASSERT_NE(fleet, nullptr);
    auto client = testing::Connect(*fleet);
    v1::ModelSpec spec = testing::SmallSpec("seeded", k);
    spec.mutable_init()->set_seed(42);
    spec.mutable_init()->set_std(0.02);
    ASSERT_TRUE(client->RegisterModel(spec).ok());
    std::vector<float> p(client->plan().total());
    ASSERT_TRUE(
        client->Gather(Range{0, p.size()}, v1::DTYPE_FP32, p.data()).ok());
    results.push_back(p);
  }
  EXPECT_EQ(testing::FirstBitDifference(results[0], results[1]), -1);
  double sq = 0;
  for (float x : results[0]) sq += double(x) * x;
  const double std = std::sqrt(sq / results[0].size());
  EXPECT_NEAR(std, 0.02, 0.002);
}

}  // namespace
}  // namespace zeroshard
