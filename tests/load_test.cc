// 64 simulated workers against 2 real servers (tests/load_harness.h) for
// --load_seconds (default 12; the 60 s run is //tests:load_bench): no
// error, no lost or doubled update (ledgers exact, parameters equal the
// independent reference bit for bit), and server memory bounded: the peak
// stays within the model state plus one in-flight allowance per worker
// over the resident size after the first step.
#include <cstdio>
#include <cstdlib>

#include "gtest/gtest.h"
#include "tests/load_harness.h"

namespace zeroshard::testing {
namespace {

TEST(LoadTest, SixtyFourWorkersTwoServers) {
  LoadOptions o;
  o.workers = 64;
  o.servers = 2;
  const char* secs = std::getenv("ZEROSHARD_LOAD_SECONDS");
  o.duration = absl::Seconds(secs != nullptr ? std::atof(secs) : 12);
  const LoadResult r = RunLoad(o);
  std::printf("load: %s\n", DescribeLoad(r).c_str());
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_GT(r.steps, 0u);
  EXPECT_EQ(r.pushes, r.steps * o.workers);
  EXPECT_EQ(r.contributions_applied, r.expected_contributions);
  EXPECT_EQ(r.duplicates_ignored, 0u);
  EXPECT_TRUE(r.params_match);
  // Flow control: each worker has at most one push piece and one gather
  // chunk (<= 1 MiB each) per server in flight; allow 2 MiB per worker
  // beyond the resident size after the first step, when the steady state
  // (every slot buffer touched) is reached.
  const uint64_t bound = r.rss_first_step + o.workers * (2ull << 20);
  EXPECT_LE(r.rss_peak_sampled, bound);
  EXPECT_LE(r.vm_hwm, bound);
}

// The same under ~5% faults each way: every contribution applied exactly
// once (duplicates counted and ignored), the same bits as the reference.
TEST(LoadTest, SixtyFourWorkersUnderFaults) {
  LoadOptions o;
  o.duration = absl::Seconds(6);
  o.worker_faults = "seed=3,drop=0.05,dup=0.05,delay=0.05:10ms";
  o.server_faults = "seed=4,lose=0.05,delay=0.05:5ms";
  const LoadResult r = RunLoad(o);
  std::printf("load under faults: %s\n", DescribeLoad(r).c_str());
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_GT(r.faults_injected, 0u);
  EXPECT_EQ(r.contributions_applied, r.expected_contributions);
  EXPECT_GT(r.duplicates_ignored, 0u);
  EXPECT_TRUE(r.params_match);
}

}  // namespace
}  // namespace zeroshard::testing
