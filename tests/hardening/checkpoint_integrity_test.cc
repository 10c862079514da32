// Issue 23, item 3: restore checks every file against the size and CRC its
// MANIFEST records, and a damaged or missing newest checkpoint falls back
// to the newest intact one. A real zeroshard-server with a model whose
// shard file spans several 1 MiB blocks (> 2 MiB) and three checkpoints:
//   (b) the newest's shard file deleted: a restart (SIGKILL, no snapshot)
//       comes up on the one before, with one log line saying so, and a
//       Restore of the deleted step is refused with the state unchanged;
//   (a) two 1 MiB blocks (with their block CRCs) swapped in the next one:
//       the same, and Restore of "latest" falls back too.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/hardening/checkpoint_testing.h"
#include "tests/testing.h"

namespace zeroshard::testing {
namespace {

constexpr uint64_t kBlock = 1 << 20;

// The log of the n-th restart of server 0.
std::string RestartLog(const CkptJob& job, int n) {
  return ReadAll(absl::StrCat(job.root, "/server-0.restart-", n, ".log"));
}

TEST(CheckpointIntegrity, DamagedNewestCheckpointFallsBackToAnIntactOne) {
  auto job = StartCkptJob("integrity", 1);
  ASSERT_NE(job, nullptr);
  RegisterAndInit(*job, SmallSpec("integrity", 1, /*scale=*/12));
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  std::vector<std::vector<float>> at(4);  // gathered at steps 1..3
  for (uint64_t step = 0; step < 3; ++step) {
    TrainStep(*job, step);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    CheckpointStep(*job, step + 1);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    at[step + 1] = GatherAll(*job);
  }
  const std::string file3 = ShardPath(*job, 3, 0, 1);
  const std::string file2 = ShardPath(*job, 2, 0, 1);
  ASSERT_GT(ReadAll(file2).size(), 2 * (kBlock + 4) + 100) << "model too small";

  // (b) The newest checkpoint's shard file is gone.
  ASSERT_EQ(std::remove(file3.c_str()), 0);
  absl::Status restarted = job->fleet->Restart(0);
  ASSERT_TRUE(restarted.ok()) << restarted;
  uint64_t step = 0;
  EXPECT_EQ(FirstBitDifference(GatherAll(*job, &step), at[2]), -1);
  EXPECT_EQ(step, 2u);
  std::string log = RestartLog(*job, 1);
  EXPECT_NE(FindLine(log, "step-0000000003"), "") << log;
  EXPECT_NE(FindLine(log, "restored step 2"), "") << log;
  grpc::Status r = RawRestore(*job, 0, 3, 1);
  EXPECT_TRUE(r.error_code() == grpc::StatusCode::DATA_LOSS ||
              r.error_code() == grpc::StatusCode::FAILED_PRECONDITION)
      << r.error_code() << " " << r.error_message();
  EXPECT_EQ(FirstBitDifference(GatherAll(*job, &step), at[2]), -1);
  EXPECT_EQ(step, 2u);

  // (a) Swap the first two blocks (each with its CRC) of step 2's file:
  // every block still checks, the file's CRC does not.
  std::string bytes = ReadAll(file2);
  const uint64_t start = PayloadStart(bytes);
  const std::string b0 = bytes.substr(start, kBlock + 4);
  const std::string b1 = bytes.substr(start + kBlock + 4, kBlock + 4);
  ASSERT_NE(b0, b1);
  bytes.replace(start, kBlock + 4, b1);
  bytes.replace(start + kBlock + 4, kBlock + 4, b0);
  WriteAll(file2, bytes);
  restarted = job->fleet->Restart(0);
  ASSERT_TRUE(restarted.ok()) << restarted;
  EXPECT_EQ(FirstBitDifference(GatherAll(*job, &step), at[1]), -1);
  EXPECT_EQ(step, 1u);
  log = RestartLog(*job, 2);
  EXPECT_NE(FindLine(log, "step-0000000002"), "") << log;
  EXPECT_NE(FindLine(log, "restored step 1"), "") << log;
  r = RawRestore(*job, 0, 2, 1);
  EXPECT_EQ(r.error_code(), grpc::StatusCode::DATA_LOSS)
      << r.error_code() << " " << r.error_message();
  EXPECT_NE(r.error_message().find("CRC"), std::string::npos)
      << r.error_message();
  EXPECT_EQ(FirstBitDifference(GatherAll(*job, &step), at[1]), -1);
  EXPECT_EQ(step, 1u);
  // "Latest" skips both damaged checkpoints, saying so in the log.
  v1::RestoreResponse resp;
  r = RawRestore(*job, 0, 0, 2, &resp);
  EXPECT_TRUE(r.ok()) << r.error_message();
  EXPECT_EQ(resp.step(), 1u);
  EXPECT_EQ(FirstBitDifference(GatherAll(*job, &step), at[1]), -1);
  log = RestartLog(*job, 2);
  EXPECT_NE(FindLine(log, "falling back"), "") << log;
}

}  // namespace
}  // namespace zeroshard::testing
