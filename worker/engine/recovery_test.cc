// Nothing lost (issue 7): real zeroshard-server processes with
// --checkpoint_dir, two in-process ranks (ZeRO-3).
//   - servers killed with SIGKILL at random points and restarted: the run
//     (fp16, dynamic loss scale) rolls back to the newest checkpoint and
//     ends bit-identical to an uninterrupted run of the same seed, with the
//     same loss scales and skipped steps;
//   - a flipped bit in the newest checkpoint: that server falls back (one
//     log line), the job resumes from the previous complete checkpoint and
//     still ends bit-identical;
//   - a server stopped by SIGTERM and restarted: the job resumes at the
//     server's shutdown snapshot, redoing no committed step;
// (Resharding a checkpoint to another K: tests/reshard_test.cc.)
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/env/env.h"
#include "gtest/gtest.h"
#include "worker/engine/testing.h"

namespace zeroshard::engine {
namespace {

// A client for the test's own Stats reads; null (and a failure) if it
// cannot connect.
std::unique_ptr<ShardClient> Watch(LocalFleet* fleet) {
  ClientOptions o;
  o.addresses = fleet->addresses();
  absl::StatusOr<std::unique_ptr<ShardClient>> client = ShardClient::Connect(o);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
}

std::string ReadAll(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// In fp16 with a dynamic loss scale that keeps moving (it grows every three
// clean steps until gradients overflow): a roll back must restore the
// scaler's whole state too, or the scales, skips and bits differ.
TEST(Recovery, ServerKilledAtRandomPointsEndsBitIdentical) {
  setvbuf(stdout, nullptr, _IONBF, 0);
  train::TrainSpec spec = CheckpointedSpec(64);
  spec.zero.precision = engine::Precision::kFp16;
  spec.zero.loss_scaler.dynamic = true;
  spec.zero.loss_scaler.initial_scale = 1 << 18;
  spec.zero.loss_scaler.scale_window = 3;
  const auto start = std::chrono::steady_clock::now();
  auto reference = RunCheckpointed(spec, 2, FreshTestDir("reference"));
  ASSERT_TRUE(reference.ok()) << reference.status();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  const uint64_t seed = std::random_device()();
  std::printf("kill seed %llu (reference run %.2f s)\n",
              static_cast<unsigned long long>(seed), seconds);
  std::mt19937_64 rng(seed);

  auto fleet = StartTestFleet(
      2, {absl::StrCat("--checkpoint_dir=", FreshTestDir("killed"))});
  ASSERT_TRUE(fleet.ok()) << fleet.status();
  absl::StatusOr<std::vector<train::TrainResult>> results;
  // Kills at random moments while the run lasts; after each, wait until
  // the job is two steps past the restarted server's checkpoint.
  std::unique_ptr<ShardClient> watcher = Watch(fleet->get());
  ASSERT_NE(watcher, nullptr);
  int kills = 0;
  std::atomic<bool> done{false};
  std::thread run([&] {
    results = RunInProcessOn(spec, 2, fleet->get());
    done = true;
  });
  while (!done && kills < 4) {
    std::this_thread::sleep_for(std::chrono::duration<double>(
        std::uniform_real_distribution<>(0.05, 0.3)(rng) * seconds));
    if (done) break;
    const uint32_t victim = static_cast<uint32_t>(rng() % 2);
    absl::Status restarted = (*fleet)->Restart(victim);
    ASSERT_TRUE(restarted.ok()) << restarted;
    ++kills;
    uint64_t restored = 0, step = 0;
    while (!done) {
      auto stats = watcher->Stats();
      if (stats.ok()) {
        restored = (*stats)[victim].restored_step();
        step = (*stats)[victim].step();
        if (step >= restored + 2) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::printf("killed shard %u; it restored step %llu; job at step %llu\n",
                victim, static_cast<unsigned long long>(restored),
                static_cast<unsigned long long>(step));
  }
  run.join();
  ASSERT_TRUE(results.ok()) << results.status();
  const train::TrainResult& got = (*results)[0];
  std::printf("%d kills, %d roll backs\n", kills, got.rollbacks);
  EXPECT_GE(kills, 2);
  EXPECT_GE(got.rollbacks, 1);
  EXPECT_EQ(FirstDifference(got.params, reference->params), -1);
  // Every step is reported once and the losses match the reference's.
  ASSERT_EQ(got.micro_losses.size(), reference->micro_losses.size());
  int skipped = 0;
  for (size_t s = 0; s < got.micro_losses.size(); ++s) {
    EXPECT_EQ(got.micro_losses[s], reference->micro_losses[s]) << "step " << s;
    EXPECT_EQ(got.stats[s].loss_scale, reference->stats[s].loss_scale);
    EXPECT_EQ(got.stats[s].skipped, reference->stats[s].skipped);
    skipped += reference->stats[s].skipped;
  }
  EXPECT_GE(skipped, 4) << "the loss scale did not keep moving";
}

// A rolling restart: a server stopped by SIGTERM keeps its last commit in
// a shutdown snapshot, so the job resumes where it was instead of rolling
// back to the last checkpoint (here step 0, the only one).
TEST(Recovery, ServerStoppedBySigtermResumesWithoutRollingBack) {
  train::TrainSpec spec = CheckpointedSpec(40);
  spec.zero.checkpoint_interval = 1000;
  auto reference = RunCheckpointed(spec, 2, FreshTestDir("sigterm-reference"));
  ASSERT_TRUE(reference.ok()) << reference.status();

  auto fleet = StartTestFleet(
      2, {absl::StrCat("--checkpoint_dir=", FreshTestDir("sigterm"))});
  ASSERT_TRUE(fleet.ok()) << fleet.status();
  std::unique_ptr<ShardClient> watcher = Watch(fleet->get());
  ASSERT_NE(watcher, nullptr);
  absl::StatusOr<std::vector<train::TrainResult>> results;
  std::atomic<bool> done{false};
  std::thread run([&] {
    results = RunInProcessOn(spec, 2, fleet->get());
    done = true;
  });
  while (!done) {
    auto stats = watcher->Stats();
    if (stats.ok() && (*stats)[1].step() >= 10) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_FALSE(done) << "the run ended before the server was stopped";
  absl::Status restarted = (*fleet)->Restart(1, std::chrono::seconds(30));
  ASSERT_TRUE(restarted.ok()) << restarted;
  run.join();
  ASSERT_TRUE(results.ok()) << results.status();
  const train::TrainResult& got = (*results)[0];
  EXPECT_EQ(FirstDifference(got.params, reference->params), -1);
  ASSERT_EQ(got.micro_losses.size(), reference->micro_losses.size());
  for (size_t s = 0; s < got.micro_losses.size(); ++s) {
    EXPECT_EQ(got.micro_losses[s], reference->micro_losses[s]) << "step " << s;
  }

  auto stats = watcher->Stats(/*ledger=*/true);
  ASSERT_TRUE(stats.ok()) << stats.status();
  // The restarted server came back at its snapshot's step (no checkpoint
  // of that step exists) ...
  const uint64_t resumed = (*stats)[1].restored_step();
  std::printf("server 1 stopped by SIGTERM came back at step %llu\n",
              static_cast<unsigned long long>(resumed));
  EXPECT_GE(resumed, 10u);
  EXPECT_EQ((*stats)[1].ledger_first_step(), resumed);
  for (const v1::GetStatsResponse& s : *stats) {
    EXPECT_EQ(std::vector<uint64_t>(s.checkpoint_steps().begin(),
                                    s.checkpoint_steps().end()),
              std::vector<uint64_t>{0});
  }
  // ... and server 0 never redid a step: its ledger holds every step once,
  // those before the stop still from the first epoch.
  const v1::GetStatsResponse& live = (*stats)[0];
  ASSERT_EQ(live.ledger_first_step(), 0u);
  ASSERT_EQ(static_cast<uint64_t>(live.ledger_size()), live.step());
  for (int i = 0; i < live.ledger_size(); ++i) {
    EXPECT_EQ(live.ledger(i).step(), static_cast<uint64_t>(i));
    if (live.ledger(i).step() < resumed) {
      EXPECT_EQ(live.ledger(i).epoch(), 0u) << "step " << i << " was redone";
    }
  }
  EXPECT_GT(live.ledger(live.ledger_size() - 1).epoch(), 0u);
}

TEST(Recovery, CorruptBlockFallsBackToThePreviousCheckpoint) {
  const std::string dir = FreshTestDir("corrupt");
  auto first =
      RunCheckpointed(CheckpointedSpec(8), 2, dir);  // checkpoints 0, 4, 8
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string victim =
      absl::StrCat(dir, "/step-0000000008/shard-00001-of-00002.ckpt");
  ASSERT_TRUE(FlipByteNearEnd(victim)) << victim;
  auto fleet = StartTestFleet(2, {absl::StrCat("--checkpoint_dir=", dir)});
  ASSERT_TRUE(fleet.ok()) << fleet.status();
  auto results = RunInProcessOn(CheckpointedSpec(12), 2, fleet->get());
  ASSERT_TRUE(results.ok()) << results.status();
  // The damaged shard said so and fell back; the job resumed from step 4.
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string log =
      ReadAll(absl::StrCat(tmp ? tmp : "/tmp", "/server-1.log"));
  EXPECT_NE(log.find("checkpoint step-0000000008 is damaged"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("checksum mismatch"), std::string::npos) << log;
  EXPECT_EQ((*results)[0].micro_losses.size(), 8u);  // steps 4..11 run
  auto reference = RunCheckpointed(CheckpointedSpec(12), 2,
                                   FreshTestDir("corrupt-reference"));
  ASSERT_TRUE(reference.ok()) << reference.status();
  EXPECT_EQ(FirstDifference((*results)[0].params, reference->params), -1);
}

TEST(Recovery, NvmeServerKilledRestoresIntoItsTier) {
  const train::TrainSpec spec = CheckpointedSpec(24);
  auto reference = RunCheckpointed(spec, 2, FreshTestDir("nvme-reference"));
  ASSERT_TRUE(reference.ok()) << reference.status();
  const std::string state = FreshTestDir("nvme-state");
  ASSERT_EQ(mkdir(state.c_str(), 0755), 0) << state;
  auto fleet = StartTestFleet(
      2, {absl::StrCat("--checkpoint_dir=", FreshTestDir("nvme-ckpt")),
          "--storage=nvme", absl::StrCat("--nvme_path=", state)});
  ASSERT_TRUE(fleet.ok()) << fleet.status();
  std::unique_ptr<ShardClient> watcher = Watch(fleet->get());
  ASSERT_NE(watcher, nullptr);
  absl::StatusOr<std::vector<train::TrainResult>> results;
  std::thread run([&] { results = RunInProcessOn(spec, 2, fleet->get()); });
  for (uint64_t step = 0; step < 10;) {  // past two checkpoints
    auto stats = watcher->Stats();
    if (stats.ok()) step = (*stats)[0].step();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  absl::Status restarted = (*fleet)->Restart(0);
  run.join();
  ASSERT_TRUE(restarted.ok()) << restarted;
  ASSERT_TRUE(results.ok()) << results.status();
  EXPECT_GE((*results)[0].rollbacks, 1);
  EXPECT_EQ(FirstDifference((*results)[0].params, reference->params), -1);
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string log =
      ReadAll(absl::StrCat(tmp ? tmp : "/tmp", "/server-0.restart-1.log"));
  EXPECT_NE(log.find("discarded the previous state"), std::string::npos) << log;
}

}  // namespace
}  // namespace zeroshard::engine
