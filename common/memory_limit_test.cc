#include "common/memory_limit.h"

#include "gtest/gtest.h"

namespace zeroshard {
namespace {

constexpr uint64_t GiB = 1ull << 30, MiB = 1ull << 20;

TEST(MemoryLimitTest, MarginIsTenPercentAtLeast256MiBAtMostHalf) {
  EXPECT_EQ(MemoryMargin(64 * GiB), 64 * GiB / 10);
  EXPECT_EQ(MemoryMargin(1536 * MiB), 256 * MiB);
  EXPECT_EQ(MemoryMargin(256 * MiB), 128 * MiB);
  EXPECT_EQ(MemoryMargin(0), 0u);
}

TEST(MemoryLimitTest, ChoosesTheSmallestLimit) {
  MemoryLimits l;
  l.physical = 64 * GiB;
  auto s = ChooseStateLimit(l);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->source, "physical memory");
  EXPECT_EQ(s->bytes, 64 * GiB - 64 * GiB / 10);

  l.cgroup = 16 * GiB;
  l.cgroup_file = "/sys/fs/cgroup/job/memory.max";
  s = ChooseStateLimit(l);
  EXPECT_EQ(s->source, "cgroup /sys/fs/cgroup/job/memory.max");
  EXPECT_EQ(s->limit, 16 * GiB);

  l.rlimit_data = 8 * GiB;
  EXPECT_EQ(ChooseStateLimit(l)->source, "RLIMIT_DATA");
  l.rlimit_as = 1536 * MiB;
  s = ChooseStateLimit(l);
  EXPECT_EQ(s->source, "RLIMIT_AS");
  EXPECT_EQ(s->bytes, 1280 * MiB);
  EXPECT_EQ(s->margin, 256 * MiB);
}

TEST(MemoryLimitTest, NoLimitAtAllAndTinyLimits) {
  EXPECT_FALSE(ChooseStateLimit(MemoryLimits{}).has_value());
  MemoryLimits l;
  l.rlimit_as = 1;
  EXPECT_EQ(ChooseStateLimit(l)->bytes, 1u);  // never 0 ("no limit")
}

TEST(MemoryLimitTest, ParsesCgroupFiles) {
  EXPECT_EQ(ParseCgroupMemoryLimit("1073741824\n"), 1073741824u);
  EXPECT_EQ(ParseCgroupMemoryLimit("max\n"), std::nullopt);
  EXPECT_EQ(ParseCgroupMemoryLimit("9223372036854771712\n"), std::nullopt);
  EXPECT_EQ(ParseCgroupMemoryLimit(""), std::nullopt);
  EXPECT_EQ(ParseCgroupMemoryLimit("12k"), std::nullopt);
}

TEST(MemoryLimitTest, CgroupFilesOfV2AndV1AndAncestors) {
  EXPECT_EQ(
      CgroupMemoryLimitFiles("0::/kubepods/pod1/c1\n", "/cg"),
      (std::vector<std::string>{"/cg/kubepods/pod1/c1/memory.max",
                                "/cg/kubepods/pod1/memory.max",
                                "/cg/kubepods/memory.max", "/cg/memory.max"}));
  EXPECT_EQ(CgroupMemoryLimitFiles("5:cpu:/x\n4:memory:/job/a\n0::/\n", "/cg"),
            (std::vector<std::string>{"/cg/memory/job/a/memory.limit_in_bytes",
                                      "/cg/memory/job/memory.limit_in_bytes",
                                      "/cg/memory/memory.limit_in_bytes",
                                      "/cg/memory.max"}));
  EXPECT_EQ(CgroupMemoryLimitFiles("3:cpuacct,memory:/\n", "/cg"),
            (std::vector<std::string>{"/cg/memory/memory.limit_in_bytes"}));
  EXPECT_TRUE(CgroupMemoryLimitFiles("garbage\n1:pids:/\n", "/cg").empty());
}

TEST(MemoryLimitTest, ReadsThisProcess) {
  const MemoryLimits l = ReadMemoryLimits();
  ASSERT_TRUE(l.physical.has_value());
  EXPECT_GT(*l.physical, 0u);
  EXPECT_TRUE(ChooseStateLimit(l).has_value());
}

TEST(MemoryLimitTest, HumanBytes) {
  EXPECT_EQ(HumanBytes(1536 * MiB), "1.5 GiB");
  EXPECT_EQ(HumanBytes(12), "12 B");
}

}  // namespace
}  // namespace zeroshard
