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
//   - resharding: a checkpoint written by K=3 restored by K'=2 and K'=4
//     gives the same p, m, v, and training continues bit-identically.
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
#include "server/checkpoint/checkpoint_files.h"
#include "worker/engine/testing.h"

namespace zeroshard::engine {
namespace {

std::string FreshDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp ? tmp : "/tmp", "/", name);
  const int rc = std::system(absl::StrCat("rm -rf '", dir, "'").c_str());
  EXPECT_EQ(rc, 0) << dir;
  return dir;
}

train::TrainSpec Spec(int steps) {
  train::TrainSpec spec = TinySpec(3, false, "ckpt-job");
  spec.steps = steps;
  spec.zero.checkpoint_interval = 4;
  spec.zero.recovery_timeout_seconds = 60;
  return spec;
}

// A run of `spec` on 2 ranks against K fresh servers checkpointing to `dir`.
absl::StatusOr<train::TrainResult> RunFresh(const train::TrainSpec& spec,
                                            uint32_t k,
                                            const std::string& dir) {
  auto fleet = StartTestFleet(k, {absl::StrCat("--checkpoint_dir=", dir)});
  if (!fleet.ok()) return fleet.status();
  auto results = RunInProcessOn(spec, 2, fleet->get());
  if (!results.ok()) return results.status();
  return (*results)[0];
}

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
  train::TrainSpec spec = Spec(64);
  spec.zero.precision = engine::Precision::kFp16;
  spec.zero.loss_scaler.dynamic = true;
  spec.zero.loss_scaler.initial_scale = 1 << 18;
  spec.zero.loss_scaler.scale_window = 3;
  const auto start = std::chrono::steady_clock::now();
  auto reference = RunFresh(spec, 2, FreshDir("reference"));
  ASSERT_TRUE(reference.ok()) << reference.status();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  const uint64_t seed = std::random_device()();
  std::printf("kill seed %llu (reference run %.2f s)\n",
              static_cast<unsigned long long>(seed), seconds);
  std::mt19937_64 rng(seed);

  auto fleet = StartTestFleet(
      2, {absl::StrCat("--checkpoint_dir=", FreshDir("killed"))});
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
  train::TrainSpec spec = Spec(40);
  spec.zero.checkpoint_interval = 1000;
  auto reference = RunFresh(spec, 2, FreshDir("sigterm-reference"));
  ASSERT_TRUE(reference.ok()) << reference.status();

  auto fleet = StartTestFleet(
      2, {absl::StrCat("--checkpoint_dir=", FreshDir("sigterm"))});
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
  const std::string dir = FreshDir("corrupt");
  auto first = RunFresh(Spec(8), 2, dir);  // checkpoints 0, 4, 8
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string victim =
      absl::StrCat(dir, "/step-0000000008/shard-00001-of-00002.ckpt");
  ASSERT_TRUE(FlipByteNearEnd(victim)) << victim;
  auto fleet = StartTestFleet(2, {absl::StrCat("--checkpoint_dir=", dir)});
  ASSERT_TRUE(fleet.ok()) << fleet.status();
  auto results = RunInProcessOn(Spec(12), 2, fleet->get());
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
  auto reference = RunFresh(Spec(12), 2, FreshDir("corrupt-reference"));
  ASSERT_TRUE(reference.ok()) << reference.status();
  EXPECT_EQ(FirstDifference((*results)[0].params, reference->params), -1);
}

TEST(Recovery, NvmeServerKilledRestoresIntoItsTier) {
  const train::TrainSpec spec = Spec(24);
  auto reference = RunFresh(spec, 2, FreshDir("nvme-reference"));
  ASSERT_TRUE(reference.ok()) << reference.status();
  const std::string state = FreshDir("nvme-state");
  ASSERT_EQ(mkdir(state.c_str(), 0755), 0) << state;
  auto fleet = StartTestFleet(
      2, {absl::StrCat("--checkpoint_dir=", FreshDir("nvme-ckpt")),
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

// p, m, v of the whole model from the checkpoint `manifest` under `dir`.
std::vector<float> LoadAll(const std::string& dir,
                           const v1::CheckpointManifest& m, uint64_t total) {
  std::vector<float> all(3 * total);
  absl::Status s = checkpoint::LoadRange(
      DefaultEnv(), dir, m, Range{0, total},
      [&](int a, uint64_t off, uint64_t n, const float* d) {
        std::copy(d, d + n, all.begin() + a * total + off);
        return absl::OkStatus();
      });
  EXPECT_TRUE(s.ok()) << s;
  return all;
}

TEST(Recovery, ReshardsFromThreeServersToTwoAndFour) {
  auto reference = RunFresh(Spec(12), 3, FreshDir("reshard-reference"));
  ASSERT_TRUE(reference.ok()) << reference.status();
  for (uint32_t k2 : {2u, 4u}) {
    SCOPED_TRACE(absl::StrCat("K'=", k2));
    const std::string dir = FreshDir(absl::StrCat("reshard-", k2));
    ASSERT_TRUE(RunFresh(Spec(8), 3, dir).ok());
    auto listing = checkpoint::ListCheckpoints(DefaultEnv(), dir);
    ASSERT_TRUE(listing.ok());
    const v1::CheckpointManifest by3 = listing->complete[0];
    ASSERT_EQ(by3.step(), 8u);
    ASSERT_EQ(by3.spec().num_servers(), 3u);
    const uint64_t total = by3.shards(2).offset() + by3.shards(2).length();

    auto fleet = StartTestFleet(k2, {absl::StrCat("--checkpoint_dir=", dir)});
    ASSERT_TRUE(fleet.ok()) << fleet.status();
    // Each new server restored its new range at start; write the state
    // back out with K' shards and compare p, m, v element for element.
    ClientOptions o;
    o.addresses = (*fleet)->addresses();
    auto client = ShardClient::Connect(o);
    ASSERT_TRUE(client.ok());
    ASSERT_TRUE((*client)->AttachToRegistered().ok());
    auto shards = (*client)->Checkpoint(8, nullptr, "resharded");
    ASSERT_TRUE(shards.ok()) << shards.status();
    auto again = checkpoint::ListCheckpoints(DefaultEnv(), dir);
    ASSERT_TRUE(again.ok());
    const v1::CheckpointManifest byk = again->complete[0];
    ASSERT_EQ(byk.spec().num_servers(), k2);
    EXPECT_EQ(
        FirstDifference(LoadAll(dir, by3, total), LoadAll(dir, byk, total)),
        -1);
    // Training continues from step 8 to 12 exactly as the K=3 run did.
    auto results = RunInProcessOn(Spec(12), 2, fleet->get());
    ASSERT_TRUE(results.ok()) << results.status();
    EXPECT_EQ((*results)[0].micro_losses.size(), 4u);
    EXPECT_EQ(FirstDifference((*results)[0].params, reference->params), -1);
  }
}

}  // namespace
}  // namespace zeroshard::engine
