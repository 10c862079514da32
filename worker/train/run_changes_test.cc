#include "worker/train/run_changes.h"

#include "gtest/gtest.h"

namespace zeroshard::train {
namespace {

v1::TrainerState StateOf(uint32_t world, const std::string& data) {
  v1::TrainerState s;
  s.set_step(6);
  s.set_seed(1);
  s.set_world_size(world);
  s.set_micro_batch(2);
  s.set_seq_len(16);
  s.set_gradient_accumulation_steps(1);
  s.set_lr(3e-3);
  s.set_data(data);
  s.set_data_epoch(1);
  s.set_data_shard(2);
  s.set_data_offset(384);
  return s;
}

TEST(RunChangesTest, TheSameRunChangesNothing) {
  const v1::TrainerState then = StateOf(2, "a.bin");
  EXPECT_TRUE(RunChanges(then, then).changes.empty());
  EXPECT_EQ(DescribeRunChanges(RunChanges(then, then), then), "");
}

TEST(RunChangesTest, AStateThatRecordedNoRunIsNotCompared) {
  v1::TrainerState old_build = StateOf(0, "");
  old_build.set_lr(0);
  const RunChangeList c = RunChanges(old_build, StateOf(4, "b.bin"));
  EXPECT_TRUE(c.changes.empty());
  EXPECT_FALSE(c.batches_differ);
}

TEST(RunChangesTest, EveryFieldInOrder) {
  const v1::TrainerState then = StateOf(2, "a.bin");
  v1::TrainerState now = StateOf(4, "a.bin,b.bin");
  now.set_micro_batch(4);
  now.set_seq_len(32);
  now.set_gradient_accumulation_steps(3);
  now.set_lr(1e-3);
  now.set_seed(9);  // real data: the seed draws nothing
  const RunChangeList c = RunChanges(then, now);
  EXPECT_EQ(c.changes,
            (std::vector<std::string>{
                "workers 2 -> 4", "micro batch 2 -> 4",
                "sequence length 16 -> 32", "gradient accumulation 1 -> 3",
                "lr 0.003 -> 0.001", "data a.bin -> a.bin,b.bin"}));
  EXPECT_TRUE(c.batches_differ);
  EXPECT_EQ(DescribeRunChanges(c, then),
            "changed since the state of step 6 was recorded: workers 2 -> 4; "
            "micro batch 2 -> 4; sequence length 16 -> 32; gradient "
            "accumulation 1 -> 3; lr 0.003 -> 0.001; data a.bin -> "
            "a.bin,b.bin (the data continue from the same position: epoch "
            "1, shard 2, token offset 384)");
}

TEST(RunChangesTest, ALearningRateAloneLeavesTheBatchesAlone) {
  v1::TrainerState now = StateOf(2, "a.bin");
  now.set_lr(1e-4);
  const RunChangeList c = RunChanges(StateOf(2, "a.bin"), now);
  EXPECT_EQ(c.changes, std::vector<std::string>{"lr 0.003 -> 0.0001"});
  EXPECT_FALSE(c.batches_differ);
  EXPECT_EQ(DescribeRunChanges(c, StateOf(2, "a.bin")),
            "changed since the state of step 6 was recorded: lr 0.003 -> "
            "0.0001");
}

TEST(RunChangesTest, SyntheticTokensNameTheSeedAndNoPosition) {
  v1::TrainerState now = StateOf(4, "");
  now.set_seed(2);
  const RunChangeList c = RunChanges(StateOf(2, ""), now);
  EXPECT_EQ(c.changes,
            (std::vector<std::string>{"workers 2 -> 4",
                                      "seed 1 -> 2 (other synthetic tokens)"}));
  EXPECT_FALSE(c.batches_differ);
  EXPECT_EQ(RunChanges(StateOf(2, ""), StateOf(2, "x.bin")).changes,
            std::vector<std::string>{"data (synthetic tokens) -> x.bin"});
}

TEST(RunChangesTest, ALongListOfFilesIsRecordedShort) {
  EXPECT_EQ(DataRecord({"a.bin", "b.bin"}), "a.bin,b.bin");
  EXPECT_EQ(DataRecord({}), "");
  std::vector<std::string> many;
  for (int i = 0; i < 100; ++i) many.push_back("shard_" + std::to_string(i));
  const std::string record = DataRecord(many);
  EXPECT_LE(record.size(), kMaxDataRecord);
  EXPECT_EQ(record.rfind("100 files (shard_0 .. shard_99), crc32c ", 0), 0u)
      << record;
  many[50] = "other";  // another list, the same ends
  EXPECT_NE(DataRecord(many), record);
}

}  // namespace
}  // namespace zeroshard::train
