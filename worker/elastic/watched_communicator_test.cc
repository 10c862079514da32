#include "worker/elastic/watched_communicator.h"

#include "gtest/gtest.h"

namespace zeroshard::elastic {
namespace {

using collective::CollectiveOp;
using collective::DType;

// Every operation finishes at once with `next`.
class FakeCommunicator : public collective::Communicator {
 public:
  absl::Status next;
  int rank() const override { return 1; }
  int size() const override { return 2; }
  collective::MemorySpace memory_space() const override {
    return collective::MemorySpace::kHost;
  }
  uint32_t part_alignment() const override { return 4; }
  CollectiveOp AllReduce(void*, uint64_t, DType) override { return Op(); }
  CollectiveOp ReduceScatter(void*, uint64_t, DType) override { return Op(); }
  CollectiveOp AllGather(void*, uint64_t, DType) override { return Op(); }
  CollectiveOp Broadcast(void*, uint64_t, DType, int) override { return Op(); }
  CollectiveOp Barrier() override { return Op(); }

 private:
  CollectiveOp Op() { return CollectiveOp::Finished(next); }
};

TEST(WatchedCommunicator, ForwardsAndTellsAFailedOperation) {
  FakeCommunicator inner;
  WatchedCommunicator comm(&inner);
  EXPECT_EQ(comm.rank(), 1);
  EXPECT_EQ(comm.size(), 2);
  EXPECT_EQ(comm.part_alignment(), 4u);
  float x = 0;
  EXPECT_TRUE(comm.AllReduce(&x, 1, DType::kFloat32).Wait().ok());
  EXPECT_TRUE(comm.Barrier().Wait().ok());
  EXPECT_FALSE(comm.failed());
  inner.next = absl::UnavailableError("rank 0 is unreachable");
  EXPECT_TRUE(
      absl::IsUnavailable(comm.Broadcast(&x, 1, DType::kFloat32, 0).Wait()));
  EXPECT_TRUE(comm.failed());
  // Only the last kWatchedOps operations count.
  inner.next = absl::OkStatus();
  for (size_t i = 0; i < kWatchedOps; ++i) {
    comm.AllGather(&x, 1, DType::kFloat32).Wait().IgnoreError();
  }
  EXPECT_FALSE(comm.failed());
}

}  // namespace
}  // namespace zeroshard::elastic
