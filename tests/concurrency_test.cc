// 32 client threads push and gather concurrently against 2 real servers for
// several steps: every contribution is received exactly once (the servers'
// ledgers), deliberate duplicates are acknowledged and ignored, gathers
// never see a half-committed step, and the result equals the reference.
// And one client's calls never exceed what a server's threads take.
#include <atomic>
#include <thread>

#include "absl/synchronization/barrier.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "tests/testing.h"

namespace zeroshard {
namespace {

TEST(ConcurrencyTest, ThirtyTwoThreadsTwoServers) {
  constexpr uint32_t kThreads = 32;
  constexpr uint64_t kSteps = 4;
  auto fleet = testing::StartFleet(2, {"--grpc_threads=64"});
  ASSERT_NE(fleet, nullptr);
  const v1::ModelSpec spec = testing::SmallSpec("concurrency", 2, 4);
  auto leader = testing::Connect(*fleet);
  ASSERT_TRUE(leader->RegisterModel(spec).ok());
  const PartitionPlan& plan = leader->plan();
  const uint64_t total = plan.total();
  std::mt19937_64 rng(77);
  const std::vector<float> init = testing::RandomVector(rng, total, 0.05f);
  ASSERT_TRUE(leader->WriteParameters(Range{0, total}, init.data()).ok());
  std::vector<std::vector<float>> grads;
  for (uint64_t s = 0; s < kSteps; ++s) {
    grads.push_back(testing::RandomVector(rng, total, 1.0f));
  }

  std::atomic<uint64_t> duplicates_sent{0}, pieces_sent{0}, gathers{0};
  std::atomic<bool> failed{false};
  absl::Mutex mu;
  std::string first_error;
  auto fail = [&](const absl::Status& s) {
    absl::MutexLock l(&mu);
    if (first_error.empty()) first_error = std::string(s.message());
    failed = true;
  };
  // Steps: all threads push, then the leader prepares and commits while the
  // threads gather; the barriers separate the phases.
  std::vector<std::unique_ptr<absl::Barrier>> pushed, committed;
  for (uint64_t s = 0; s < kSteps; ++s) {
    pushed.push_back(std::make_unique<absl::Barrier>(kThreads + 1));
    committed.push_back(std::make_unique<absl::Barrier>(kThreads + 1));
  }
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto client = testing::Connect(*fleet);
      if (!client->RegisterModel(spec).ok()) failed = true;
      const Range slice = plan.WorkerSlice(kThreads, t);
      std::vector<float> buf(total);
      for (uint64_t s = 0; s < kSteps; ++s) {
        if (!slice.empty()) {
          const PushId id{0, s, 0, absl::StrCat("t", t, "/s", s)};
          const float* g = grads[s].data() + slice.begin;
          absl::Status st = client->Push(slice, v1::DTYPE_FP32, g, id);
          if (!st.ok()) fail(st);
          pieces_sent += plan.Split(slice).size();
          if (t % 3 == 0) {  // a retry of a push that already succeeded
            st = client->Push(slice, v1::DTYPE_FP32, g, id);
            if (!st.ok()) fail(st);
            duplicates_sent += plan.Split(slice).size();
          }
        }
        // Gathers race with other threads' pushes: they must see step s.
        uint64_t step = 0;
        absl::Status st =
            client->Gather(Range{0, total}, v1::DTYPE_FP32, buf.data(), &step);
        if (!st.ok()) fail(st);
        if (step != s) fail(absl::InternalError("gather saw a wrong step"));
        ++gathers;
        if (pushed[s]->Block()) pushed[s].reset();
        // Gathers racing with the commit: ABORTED ones are retried inside
        // the client; any success reflects s or s + 1 on every server.
        st = client->Gather(Range{0, total}, v1::DTYPE_BF16, buf.data(), &step);
        if (!st.ok()) fail(st);
        if (step != s && step != s + 1) {
          fail(absl::InternalError("gather saw a wrong step during commit"));
        }
        if (committed[s]->Block()) committed[s].reset();
      }
    });
  }
  testing::ReferenceAdamW reference(spec, init);
  for (uint64_t s = 0; s < kSteps; ++s) {
    if (pushed[s]->Block()) pushed[s].reset();
    auto norm = leader->Prepare(0, s);
    ASSERT_TRUE(norm.ok()) << norm.status();
    ASSERT_TRUE(leader->Commit(0, s, 1.0f, 1e-3, false).ok());
    reference.Step(grads[s], 1.0f, 1e-3);
    if (committed[s]->Block()) committed[s].reset();
  }
  for (auto& th : threads) th.join();
  ASSERT_FALSE(failed.load()) << first_error;

  auto stats = leader->Stats();
  ASSERT_TRUE(stats.ok());
  uint64_t applied = 0, duplicates = 0, elements = 0;
  for (const auto& st : *stats) {
    applied += st.contributions_applied();
    duplicates += st.duplicates_ignored();
    elements += st.elements_applied();
    EXPECT_EQ(st.step(), kSteps);
    EXPECT_EQ(st.optimizer_steps(), kSteps);
  }
  EXPECT_EQ(applied, pieces_sent.load());
  EXPECT_EQ(duplicates, duplicates_sent.load());
  EXPECT_EQ(elements, kSteps * total);
  EXPECT_EQ(gathers.load(), kThreads * kSteps);
  std::vector<float> p(total);
  ASSERT_TRUE(leader->Gather(Range{0, total}, v1::DTYPE_FP32, p.data()).ok());
  EXPECT_EQ(testing::FirstBitDifference(p, reference.params()), -1);
}

// WriteParameters is a synchronous call on the server (one of its
// --grpc_threads each): 17 MiB in 1 MiB pieces to a server with 2 threads
// is written whole (the client keeps a few streams in flight and retries
// "Server Threadpool Exhausted") and gathered back.
TEST(ConcurrencyTest, ManyPiecesToAServerWithTwoThreads) {
  auto fleet = testing::StartFleet(1, {"--grpc_threads=2"});
  ASSERT_NE(fleet, nullptr);
  ClientOptions options;
  options.addresses = fleet->addresses();
  options.max_piece_bytes = 1 << 20;
  auto client = ShardClient::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();
  const v1::ModelSpec spec = testing::SmallSpec("threads", 1, 190);
  ASSERT_TRUE((*client)->RegisterModel(spec).ok());
  const uint64_t total = (*client)->plan().total();
  ASSERT_GT(total * 4, uint64_t{16} << 20);
  std::mt19937_64 rng(5);
  const std::vector<float> init = testing::RandomVector(rng, total, 0.05f);
  const absl::Status written =
      (*client)->WriteParameters(Range{0, total}, init.data());
  ASSERT_TRUE(written.ok()) << written;
  std::vector<float> back(total);
  ASSERT_TRUE(
      (*client)->Gather(Range{0, total}, v1::DTYPE_FP32, back.data()).ok());
  EXPECT_EQ(testing::FirstBitDifference(back, init), -1);
}

}  // namespace
}  // namespace zeroshard
