#include "server/checkpoint/checkpoint_files.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/env/files.h"
#include "common/env/mem_env.h"
#include "gtest/gtest.h"

namespace zeroshard::checkpoint {
namespace {

// Element e of array a of the whole model: distinct everywhere.
float Value(int a, uint64_t e) { return static_cast<float>(a * 1e6 + e); }

v1::ModelSpec Spec(uint32_t k) {
  v1::ModelSpec spec;
  spec.set_job_id("job");
  spec.set_num_servers(k);
  return spec;
}

// Writes a complete checkpoint of `total` elements split evenly over k
// shards (block of 40 bytes so that arrays straddle blocks).
v1::CheckpointManifest WriteCheckpoint(Env* env, uint64_t step, uint64_t total,
                                       uint32_t k) {
  v1::CheckpointManifest m;
  m.set_step(step);
  m.set_optimizer_steps(step - 1);
  *m.mutable_spec() = Spec(k);
  m.mutable_trainer_state()->set_step(step);
  for (uint32_t s = 0; s < k; ++s) {
    v1::ShardCheckpointHeader h;
    h.set_step(step);
    h.set_optimizer_steps(step - 1);
    *h.mutable_spec() = Spec(k);
    h.set_shard_index(s);
    h.set_offset(total * s / k);
    h.set_length(total * (s + 1) / k - total * s / k);
    h.set_block_bytes(40);
    auto shard = WriteShardFile(
        env, "/ckpt", h, [&](int a, uint64_t off, uint64_t n, float* out) {
          for (uint64_t i = 0; i < n; ++i)
            out[i] = Value(a, h.offset() + off + i);
          return absl::OkStatus();
        });
    EXPECT_TRUE(shard.ok()) << shard.status();
    *m.add_shards() = *shard;
  }
  EXPECT_TRUE(WriteManifest(env, "/ckpt", m).ok());
  return m;
}

TEST(CheckpointFiles, LoadsAnyRangeAcrossShards) {
  MemEnv env(false);
  const v1::CheckpointManifest m = WriteCheckpoint(&env, 7, 103, 3);
  for (Range want : {Range{0, 103}, Range{30, 71}, Range{34, 35}}) {
    std::vector<float> got(3 * want.size(), -1);
    ASSERT_TRUE(LoadRange(&env, "/ckpt", m, want,
                          [&](int a, uint64_t off, uint64_t n, const float* d) {
                            std::memcpy(&got[a * want.size() + off], d, n * 4);
                            return absl::OkStatus();
                          })
                    .ok());
    for (int a = 0; a < 3; ++a) {
      for (uint64_t e = want.begin; e < want.end; ++e) {
        ASSERT_EQ(got[a * want.size() + e - want.begin], Value(a, e));
      }
    }
  }
}

TEST(CheckpointFiles, ListsCompleteNewestFirstAndSkipsIncomplete) {
  MemEnv env(false);
  WriteCheckpoint(&env, 5, 50, 2);
  WriteCheckpoint(&env, 10, 50, 2);
  ASSERT_TRUE(env.CreateDir("/ckpt/step-0000000015").ok());  // no MANIFEST
  auto listing = ListCheckpoints(&env, "/ckpt");
  ASSERT_TRUE(listing.ok()) << listing.status();
  ASSERT_EQ(listing->complete.size(), 2u);
  EXPECT_EQ(listing->complete[0].step(), 10u);
  EXPECT_EQ(listing->complete[1].step(), 5u);
  ASSERT_EQ(listing->skipped.size(), 1u);
  EXPECT_NE(listing->skipped[0].find("step-0000000015: incomplete"),
            std::string::npos);
  EXPECT_TRUE(ListCheckpoints(&env, "/missing")->complete.empty());
}

TEST(CheckpointFiles, RemoveCheckpointLeavesTheOthersAndForeignFiles) {
  MemEnv env(false);
  const v1::CheckpointManifest five = WriteCheckpoint(&env, 5, 50, 2);
  const v1::CheckpointManifest ten = WriteCheckpoint(&env, 10, 50, 2);
  ASSERT_TRUE(WriteFileAtomic(&env,
                              "/ckpt/step-0000000005/SNAPSHOT-00000-of-00002",
                              "a snapshot's")
                  .ok());
  absl::StatusOr<bool> gone = RemoveCheckpoint(&env, "/ckpt", five);
  ASSERT_TRUE(gone.ok()) << gone.status();
  EXPECT_FALSE(*gone);  // the snapshot keeps its directory
  auto listing = ListCheckpoints(&env, "/ckpt");
  ASSERT_TRUE(listing.ok()) << listing.status();
  ASSERT_EQ(listing->complete.size(), 1u);
  EXPECT_EQ(listing->complete[0].step(), 10u);
  // Its files are gone; what it does not name stays, with its directory.
  EXPECT_EQ(*env.ListDir("/ckpt/step-0000000005"),
            std::vector<std::string>{"SNAPSHOT-00000-of-00002"});
  // Twice (another server sharing the directory got there first): OK.
  EXPECT_TRUE(RemoveCheckpoint(&env, "/ckpt", five).ok());
  gone = RemoveCheckpoint(&env, "/ckpt", ten);
  ASSERT_TRUE(gone.ok() && *gone);
  EXPECT_FALSE(env.ListDir("/ckpt/step-0000000010").ok());  // dir removed
  EXPECT_TRUE(ListCheckpoints(&env, "/ckpt")->complete.empty());
}

// A server killed while it wrote left "<file>.tmp-<pid>-<n>": removing the
// checkpoint takes it too, and an abandoned attempt (no MANIFEST) goes
// whole; other files stay.
TEST(CheckpointFiles, TemporaryFilesOfKilledWritersAreRemoved) {
  MemEnv env(false);
  const v1::CheckpointManifest five = WriteCheckpoint(&env, 5, 50, 2);
  ASSERT_TRUE(
      WriteFileAtomic(&env,
                      "/ckpt/step-0000000005/shard-00000-of-00002.ckpt.tmp-9-1",
                      "half a shard")
          .ok());
  absl::StatusOr<bool> gone = RemoveCheckpoint(&env, "/ckpt", five);
  ASSERT_TRUE(gone.ok()) << gone.status();
  EXPECT_TRUE(*gone);
  ASSERT_TRUE(env.CreateDir("/ckpt/step-0000000007").ok());
  ASSERT_TRUE(
      WriteFileAtomic(&env,
                      "/ckpt/step-0000000007/shard-00001-of-00002.ckpt.tmp-9-2",
                      "abandoned")
          .ok());
  ASSERT_TRUE(
      WriteFileAtomic(&env, "/ckpt/step-0000000007/notes.txt", "mine").ok());
  auto listing = ListCheckpoints(&env, "/ckpt");
  ASSERT_TRUE(listing.ok());
  EXPECT_EQ(listing->incomplete, std::vector<uint64_t>{7});
  gone = RemoveAbandoned(&env, "/ckpt", 7);
  ASSERT_TRUE(gone.ok()) << gone.status();
  EXPECT_FALSE(*gone);  // notes.txt is not a checkpoint's
  EXPECT_EQ(*env.ListDir("/ckpt/step-0000000007"),
            std::vector<std::string>{"notes.txt"});
}

TEST(CheckpointFiles, BitFlipInABlockIsDataLossNamingFileAndBlock) {
  MemEnv env(false);
  const v1::CheckpointManifest m = WriteCheckpoint(&env, 3, 64, 2);
  const std::string path = "/ckpt/step-0000000003/" + m.shards(1).file();
  OpenOptions o;
  auto f = env.OpenFile(path, o);
  ASSERT_TRUE(f.ok());
  const uint64_t size = *(*f)->Size();
  char byte;
  ASSERT_TRUE((*f)->Read(size - 10, &byte, 1).ok());
  byte ^= 0x10;
  ASSERT_TRUE((*f)->Write(size - 10, &byte, 1).ok());
  absl::Status s = LoadRange(
      &env, "/ckpt", m, Range{0, 64},
      [](int, uint64_t, uint64_t, const float*) { return absl::OkStatus(); });
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_NE(s.message().find(m.shards(1).file()), std::string::npos) << s;
  EXPECT_NE(s.message().find("checksum mismatch"), std::string::npos) << s;
  // The last bytes are v's: the message says whose values the block holds
  // (shard 1 holds parameters [32, 64)).
  EXPECT_NE(s.message().find("the second moments (v) of parameters ["),
            std::string::npos)
      << s;
  EXPECT_NE(s.message().find(", 64))"), std::string::npos) << s;
  // The first shard alone still loads.
  EXPECT_TRUE(LoadRange(&env, "/ckpt", m, Range{0, 32},
                        [](int, uint64_t, uint64_t, const float*) {
                          return absl::OkStatus();
                        })
                  .ok());
}

TEST(CheckpointFiles, DamagedOrShortManifestIsSkipped) {
  MemEnv env(false);
  WriteCheckpoint(&env, 4, 20, 1);
  OpenOptions o;
  auto f = env.OpenFile("/ckpt/step-0000000004/MANIFEST", o);
  ASSERT_TRUE(f.ok());
  char byte = 0;
  ASSERT_TRUE((*f)->Read(14, &byte, 1).ok());
  byte ^= 1;
  ASSERT_TRUE((*f)->Write(14, &byte, 1).ok());
  auto listing = ListCheckpoints(&env, "/ckpt");
  ASSERT_TRUE(listing.ok());
  EXPECT_TRUE(listing->complete.empty());
  ASSERT_EQ(listing->skipped.size(), 1u);
  EXPECT_NE(listing->skipped[0].find("checksum"), std::string::npos);
}

TEST(CheckpointFiles, FileCrcDependsOnTheData) {
  MemEnv env(false);
  v1::ShardCheckpointHeader h;
  h.set_step(1);
  *h.mutable_spec() = Spec(1);
  h.set_length(30);
  h.set_block_bytes(40);
  auto fill = [](float x) {
    return [x](int, uint64_t, uint64_t n, float* out) {
      std::fill(out, out + n, x);
      return absl::OkStatus();
    };
  };
  auto a = WriteShardFile(&env, "/a", h, fill(1.0f));
  auto b = WriteShardFile(&env, "/b", h, fill(2.0f));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->bytes(), b->bytes());
  EXPECT_NE(a->crc32c(), b->crc32c());
}

TEST(CheckpointFiles, ManifestMustListEveryShardOnce) {
  MemEnv env(false);
  v1::CheckpointManifest m = WriteCheckpoint(&env, 2, 20, 2);
  m.mutable_shards()->RemoveLast();
  absl::Status s = WriteManifest(&env, "/ckpt", m);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  *m.add_shards() = m.shards(0);
  EXPECT_TRUE(absl::IsInvalidArgument(WriteManifest(&env, "/ckpt", m)));
}

TEST(CheckpointFiles, SwappedBlocksFailTheFileCrc) {
  MemEnv env(false);
  const v1::CheckpointManifest m = WriteCheckpoint(&env, 3, 64, 1);
  const std::string path = "/ckpt/step-0000000003/" + m.shards(0).file();
  OpenOptions o;
  auto f = env.OpenFile(path, o);
  ASSERT_TRUE(f.ok());
  char head[12];
  ASSERT_TRUE((*f)->Read(0, head, 12).ok());
  uint32_t len;
  std::memcpy(&len, head + 8, 4);
  const uint64_t start = 16 + len;
  // Blocks of 40 bytes, each followed by its CRC: swap the first two.
  std::string b0(44, '\0'), b1(44, '\0');
  ASSERT_TRUE((*f)->Read(start, b0.data(), 44).ok());
  ASSERT_TRUE((*f)->Read(start + 44, b1.data(), 44).ok());
  ASSERT_TRUE((*f)->Write(start, b1.data(), 44).ok());
  ASSERT_TRUE((*f)->Write(start + 44, b0.data(), 44).ok());
  absl::Status s = LoadRange(
      &env, "/ckpt", m, Range{0, 64},
      [](int, uint64_t, uint64_t, const float*) { return absl::OkStatus(); });
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_NE(s.message().find("the manifest records"), std::string::npos) << s;
}

TEST(CheckpointFiles, NamesTheServerWouldNotGiveAreRefusedLikeMissingFiles) {
  MemEnv env(false);
  const v1::CheckpointManifest m = WriteCheckpoint(&env, 6, 20, 1);
  auto load = [&](const v1::CheckpointManifest& x) {
    return LoadRange(
        &env, "/ckpt", x, Range{0, 20},
        [](int, uint64_t, uint64_t, const float*) { return absl::OkStatus(); });
  };
  ASSERT_TRUE(load(m).ok());
  for (const char* name : {"../../x.ckpt", "/etc/passwd", "", ".."}) {
    v1::CheckpointManifest bad = m;
    bad.mutable_shards(0)->set_file(name);
    absl::Status c = CheckManifest(bad, false);
    EXPECT_TRUE(absl::IsInvalidArgument(c)) << c;
    EXPECT_NE(c.message().find("CheckpointShard.file"), std::string::npos);
    EXPECT_EQ(load(bad), Unusable(6)) << name;
  }
  ASSERT_TRUE(
      env.RemoveFile("/ckpt/step-0000000006/" + m.shards(0).file()).ok());
  EXPECT_EQ(load(m), Unusable(6));
}

}  // namespace
}  // namespace zeroshard::checkpoint
