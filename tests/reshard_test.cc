// Resharding (issue 7): a checkpoint written by K = 3 shard servers and
// restored by K' = 2 and K' = 4 gives the same p, m and v element for
// element (read back from the checkpoint files the new servers write), and
// training continues from it bit-identically to the K = 3 run. Real
// zeroshard-server processes, two in-process ranks (ZeRO-3).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/env/env.h"
#include "gtest/gtest.h"
#include "server/checkpoint/checkpoint_files.h"
#include "worker/engine/testing.h"

namespace zeroshard::engine {
namespace {

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
  auto reference = RunCheckpointed(CheckpointedSpec(12), 3,
                                   FreshTestDir("reshard-reference"));
  ASSERT_TRUE(reference.ok()) << reference.status();
  for (uint32_t k2 : {2u, 4u}) {
    SCOPED_TRACE(absl::StrCat("K'=", k2));
    const std::string dir = FreshTestDir(absl::StrCat("reshard-", k2));
    ASSERT_TRUE(RunCheckpointed(CheckpointedSpec(8), 3, dir).ok());
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
    auto results = RunInProcessOn(CheckpointedSpec(12), 2, fleet->get());
    ASSERT_TRUE(results.ok()) << results.status();
    EXPECT_EQ((*results)[0].micro_losses.size(), 4u);
    EXPECT_EQ(FirstDifference((*results)[0].params, reference->params), -1);
  }
}

}  // namespace
}  // namespace zeroshard::engine
