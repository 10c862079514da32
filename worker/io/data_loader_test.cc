#include "worker/io/data_loader.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/env/mem_env.h"
#include "gtest/gtest.h"
#include "worker/io/io_testing.h"
#include "worker/io/token_file.h"

namespace zeroshard::io {
namespace {

constexpr int kVocab = 1000;

// Token i of shard s: a value that identifies (s, i).
uint16_t TokenAt(int s, int64_t i) {
  return static_cast<uint16_t>((s * 311 + i * 7) % kVocab);
}

struct Batch {
  std::vector<int32_t> inputs, targets;
  bool operator==(const Batch& o) const {
    return inputs == o.inputs && targets == o.targets;
  }
};

Batch NextBatch(DataLoader& loader) {
  Batch b;
  b.inputs.resize(loader.tokens_per_batch());
  b.targets.resize(loader.tokens_per_batch());
  const absl::Status s = loader.Next(b.inputs.data(), b.targets.data());
  EXPECT_TRUE(s.ok()) << s;
  return b;
}

class DataLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("data_loader_test");
    ASSERT_FALSE(dir_.empty());
  }
  // Writes shard_<s>.bin with n tokens; returns its path.
  std::string MakeShard(int s, int64_t n) {
    std::vector<uint16_t> t(n);
    for (int64_t i = 0; i < n; ++i) t[i] = TokenAt(s, i);
    const std::string path = dir_ + "/shard_" + std::to_string(s) + ".bin";
    EXPECT_TRUE(WriteTokenFile(path, t).ok());
    return path;
  }
  DataLoader Open(std::vector<std::string> files, int B, int T, int rank,
                  int world) {
    auto loader = DataLoader::Open(
        testing::LoaderOptions(std::move(files), B, T, rank, world, kVocab));
    EXPECT_TRUE(loader.ok()) << loader.status();
    return std::move(loader).value();
  }
  std::string dir_;
};

// Rank r of W reads [offset + r*B*T, ... + B*T + 1) of the step; steps
// advance by W*B*T; a shard's tail shorter than a step is skipped; after
// the last shard the epoch increments.
TEST_F(DataLoaderTest, BatchesFollowTheStepLayoutAcrossShardsAndEpochs) {
  const int B = 2, T = 3, W = 3;  // a step is 18 tokens (+1)
  // shard 0: 40 tokens -> 2 steps (offsets 0, 18); shard 1: 19 -> 1 step.
  const std::string s0 = MakeShard(0, 40), s1 = MakeShard(1, 19);
  for (int r = 0; r < W; ++r) {
    DataLoader loader = Open({s0, s1}, B, T, r, W);
    EXPECT_EQ(loader.steps_per_epoch(), 3);
    const struct {
      int64_t epoch, shard, offset;
    } expect[] = {{0, 0, 0}, {0, 0, 18}, {0, 1, 0}, {1, 0, 0}, {1, 0, 18}};
    for (const auto& e : expect) {
      EXPECT_EQ(loader.position(), (LoaderPosition{e.epoch, e.shard, e.offset}))
          << loader.position().ToString();
      const Batch b = NextBatch(loader);
      for (int i = 0; i < B * T; ++i) {
        const int64_t at = e.offset + r * B * T + i;
        ASSERT_EQ(b.inputs[i], TokenAt(e.shard, at)) << "rank " << r;
        ASSERT_EQ(b.targets[i], TokenAt(e.shard, at + 1)) << "rank " << r;
      }
    }
  }
}

TEST_F(DataLoaderTest, RanksAreDisjointAndCoverEachStep) {
  const int B = 4, T = 8, W = 4;
  const std::string s0 = MakeShard(0, 3 * B * T * W + 1);
  std::vector<DataLoader> ranks;
  for (int r = 0; r < W; ++r) ranks.push_back(Open({s0}, B, T, r, W));
  for (int step = 0; step < 3; ++step) {
    std::vector<int32_t> all;
    for (DataLoader& l : ranks) {
      const Batch b = NextBatch(l);
      all.insert(all.end(), b.inputs.begin(), b.inputs.end());
    }
    for (int64_t i = 0; i < static_cast<int64_t>(all.size()); ++i) {
      ASSERT_EQ(all[i], TokenAt(0, step * B * T * W + i));
    }
  }
}

TEST_F(DataLoaderTest, ResumesExactlyFromASavedPosition) {
  const int B = 2, T = 5, W = 2;
  const std::vector<std::string> files = {MakeShard(0, 67), MakeShard(1, 45),
                                          MakeShard(2, 21)};
  for (int r = 0; r < W; ++r) {
    DataLoader first = Open(files, B, T, r, W);
    for (int i = 0; i < 4; ++i) NextBatch(first);  // N = 4
    const std::string saved = first.position().ToString();
    std::vector<Batch> more;
    for (int i = 0; i < 9; ++i) more.push_back(NextBatch(first));  // M = 9
    EXPECT_GE(first.position().epoch, 1);  // crossed shards and an epoch

    DataLoader resumed = Open(files, B, T, r, W);
    auto pos = LoaderPosition::Parse(saved);
    ASSERT_TRUE(pos.ok()) << pos.status();
    ASSERT_TRUE(resumed.Seek(*pos).ok());
    for (int i = 0; i < 9; ++i) {
      EXPECT_TRUE(NextBatch(resumed) == more[i]) << "batch " << i;
    }
    EXPECT_EQ(resumed.position(), first.position());
  }
}

TEST_F(DataLoaderTest, GlobPatternsExpandInSortedOrder) {
  MakeShard(2, 30);
  MakeShard(0, 30);
  MakeShard(1, 30);
  auto files = ExpandFilePatterns({dir_ + "/shard_*.bin"});
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(*files, (std::vector<std::string>{dir_ + "/shard_0.bin",
                                              dir_ + "/shard_1.bin",
                                              dir_ + "/shard_2.bin"}));
  DataLoader loader = Open({dir_ + "/shard_*.bin"}, 1, 10, 0, 1);
  EXPECT_EQ(loader.files(), *files);
  EXPECT_EQ(loader.steps_per_epoch(), 6);  // 2 steps of 10 (+1) per shard
}

// A shard of exactly W*B*T + 1 tokens is one step; the loader loops on it.
TEST_F(DataLoaderTest, SmallestShardIsOneStep) {
  const std::string s0 = MakeShard(0, 2 * 3 + 1);
  DataLoader loader = Open({s0}, 2, 3, 0, 1);
  const Batch a = NextBatch(loader);
  EXPECT_EQ(loader.position(), (LoaderPosition{1, 0, 0}));
  EXPECT_TRUE(NextBatch(loader) == a);
}

TEST(LoaderPositionTest, SerialisesAndParses) {
  const LoaderPosition p{3, 17, 123456789012};
  EXPECT_EQ(p.ToString(), "epoch=3 shard=17 offset=123456789012");
  auto q = LoaderPosition::Parse(p.ToString());
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(*q, p);
  for (const char* bad :
       {"", "epoch=1 shard=2", "epoch=1 shard=2 offset=x",
        "epoch=-1 shard=0 offset=0", "shard=0 epoch=0 offset=0",
        "epoch=0 shard=0 offset=0 extra=1"}) {
    EXPECT_EQ(LoaderPosition::Parse(bad).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

// Patterns are expanded and shards read through the Env given to Open.
TEST(DataLoaderEnvTest, ReadsGlobbedShardsFromAMemEnv) {
  MemEnv env;
  ASSERT_TRUE(env.CreateDir("/data").ok());
  for (int s : {1, 0}) {
    std::vector<uint16_t> t(40);
    for (int64_t i = 0; i < 40; ++i) t[i] = TokenAt(s, i);
    ASSERT_TRUE(
        WriteTokenFile(absl::StrCat("/data/train_", s, ".bin"), t, &env).ok());
  }
  ASSERT_TRUE(WriteTokenFile("/data/val_0.bin", {1, 2, 3}, &env).ok());
  auto loader = DataLoader::Open(
      testing::LoaderOptions({"/data/train_*.bin"}, 2, 4, 0, 1, kVocab), &env);
  ASSERT_TRUE(loader.ok()) << loader.status();
  EXPECT_EQ(loader->files(), (std::vector<std::string>{"/data/train_0.bin",
                                                       "/data/train_1.bin"}));
  Batch b = NextBatch(*loader);
  EXPECT_EQ(b.inputs[0], TokenAt(0, 0));
  EXPECT_EQ(b.targets[7], TokenAt(0, 8));
  EXPECT_EQ(DataLoader::Open(testing::LoaderOptions({"/data/test_*.bin"}, 2, 4,
                                                    0, 1, kVocab),
                             &env)
                .status()
                .code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace zeroshard::io
