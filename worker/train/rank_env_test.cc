// RankConfigFromEnv over a fake environment: each set of names alone, both
// agreeing, both disagreeing, halves of pairs, and the error without any.
#include "worker/train/rank_env.h"

#include <map>
#include <string>

#include "gtest/gtest.h"

namespace zeroshard::train {
namespace {

using Vars = std::map<std::string, std::string>;

absl::StatusOr<collective::UcxCommunicatorConfig> From(const Vars& vars) {
  return RankConfigFromEnv([&vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

void ExpectError(const Vars& vars, const std::vector<std::string>& words) {
  auto c = From(vars);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  for (const std::string& w : words) {
    EXPECT_NE(c.status().message().find(w), std::string::npos)
        << "'" << w << "' not in: " << c.status().message();
  }
}

TEST(RankEnvTest, ZeroshardNames) {
  auto c = From({{"ZEROSHARD_RANK", "3"},
                 {"ZEROSHARD_WORLD_SIZE", "4"},
                 {"ZEROSHARD_LOCAL_RANK", "1"},
                 {"ZEROSHARD_LOCAL_SIZE", "2"},
                 {"ZEROSHARD_COORD", "10.0.0.1:2900"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rank, 3);
  EXPECT_EQ(c->world_size, 4);
  EXPECT_EQ(c->local_rank, 1);
  EXPECT_EQ(c->local_size, 2);
  EXPECT_EQ(c->coordinator, "10.0.0.1:2900");
}

TEST(RankEnvTest, TorchrunNames) {
  auto c = From({{"RANK", "2"},
                 {"WORLD_SIZE", "4"},
                 {"LOCAL_RANK", "0"},
                 {"LOCAL_WORLD_SIZE", "2"},
                 {"MASTER_ADDR", "trainer-0.trainer"},
                 {"MASTER_PORT", "29500"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rank, 2);
  EXPECT_EQ(c->world_size, 4);
  EXPECT_EQ(c->local_rank, 0);
  EXPECT_EQ(c->local_size, 2);
  EXPECT_EQ(c->coordinator, "trainer-0.trainer:29500");
}

TEST(RankEnvTest, PyTorchJobSetsNoLocalRank) {
  auto c = From({{"RANK", "1"},
                 {"WORLD_SIZE", "2"},
                 {"MASTER_ADDR", "fd00::1"},
                 {"MASTER_PORT", "23456"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->local_rank, 0);
  EXPECT_EQ(c->local_size, 1);
  EXPECT_EQ(c->coordinator, "[fd00::1]:23456");
}

TEST(RankEnvTest, TorchrunAgentStoreMovesThePortUp) {
  auto c = From({{"RANK", "0"},
                 {"WORLD_SIZE", "2"},
                 {"MASTER_ADDR", "127.0.0.1"},
                 {"MASTER_PORT", "29500"},
                 {"TORCHELASTIC_USE_AGENT_STORE", "True"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->coordinator, "127.0.0.1:29501");
}

TEST(RankEnvTest, BothAgreeing) {
  auto c = From({{"ZEROSHARD_RANK", "1"},
                 {"RANK", "1"},
                 {"ZEROSHARD_WORLD_SIZE", "2"},
                 {"WORLD_SIZE", "2"},
                 {"ZEROSHARD_COORD", "127.0.0.1:2900"},
                 {"MASTER_ADDR", "127.0.0.1"},
                 {"MASTER_PORT", "2900"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rank, 1);
  EXPECT_EQ(c->coordinator, "127.0.0.1:2900");
}

TEST(RankEnvTest, SingleRankNeedsNoCoordinator) {
  auto c = From({{"WORLD_SIZE", "1"}, {"RANK", "0"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->world_size, 1);
  EXPECT_EQ(c->coordinator, "");
}

TEST(RankEnvTest, Errors) {
  ExpectError({}, {"ZEROSHARD_RANK", "RANK, WORLD_SIZE, MASTER_ADDR",
                   "torchrun", "--elastic"});
  ExpectError({{"ZEROSHARD_RANK", "1"}, {"RANK", "0"}, {"WORLD_SIZE", "2"}},
              {"ZEROSHARD_RANK=1", "RANK=0", "disagree"});
  ExpectError(
      {{"ZEROSHARD_WORLD_SIZE", "4"}, {"WORLD_SIZE", "2"}, {"RANK", "0"}},
      {"ZEROSHARD_WORLD_SIZE=4", "WORLD_SIZE=2"});
  ExpectError({{"RANK", "0"},
               {"WORLD_SIZE", "2"},
               {"LOCAL_RANK", "0"},
               {"ZEROSHARD_LOCAL_RANK", "1"},
               {"ZEROSHARD_COORD", "h:1"}},
              {"ZEROSHARD_LOCAL_RANK=1", "LOCAL_RANK=0"});
  ExpectError({{"RANK", "0"},
               {"WORLD_SIZE", "2"},
               {"ZEROSHARD_COORD", "127.0.0.1:2900"},
               {"MASTER_ADDR", "127.0.0.1"},
               {"MASTER_PORT", "2901"}},
              {"ZEROSHARD_COORD=127.0.0.1:2900", "127.0.0.1:2901", "disagree"});
  ExpectError({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}},
              {"MASTER_PORT"});
  ExpectError({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}},
              {"MASTER_ADDR"});
  ExpectError({{"RANK", "0"}, {"WORLD_SIZE", "2"}},
              {"ZEROSHARD_COORD", "MASTER_ADDR"});
  ExpectError({{"RANK", "x"}, {"WORLD_SIZE", "2"}}, {"RANK='x'"});
  ExpectError({{"RANK", "0"}}, {"WORLD_SIZE"});
  ExpectError({{"WORLD_SIZE", "2"}}, {"RANK"});
}

}  // namespace
}  // namespace zeroshard::train
