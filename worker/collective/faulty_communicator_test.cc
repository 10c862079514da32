// FaultyCommunicator over in-process HostCommunicators: delayed operations
// give the same bits; "fail the 2nd all-reduce" fails exactly that one with
// a clear error and breaks the communicator; a rank failing alone leaves
// its peer with an error (its op_timeout), not a hang.
#include "worker/collective/faulty_communicator.h"

#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "worker/collective/host_communicator.h"
#include "worker/collective/inprocess_transport.h"
#include "worker/collective/testing.h"

namespace zeroshard {
namespace collective {
namespace {

constexpr uint64_t kCount = 1000;

// Two ranks; rank r wrapped with spec[r] (empty: not wrapped).
std::vector<std::unique_ptr<Communicator>> MakePair(
    const std::string (&spec)[2], absl::Duration op_timeout) {
  auto hub = std::make_shared<InProcessHub>(2);
  HostCommunicatorOptions o;
  o.op_timeout = op_timeout;
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < 2; ++r) {
    auto c = HostCommunicator::Create(hub->MakeTransport(r), o);
    EXPECT_TRUE(c.ok()) << c.status();
    if (spec[r].empty()) {
      comms.push_back(std::move(*c));
      continue;
    }
    auto parsed = fault::ParseFaultSpec(spec[r], fault::Side::kWorker);
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    comms.push_back(std::make_unique<FaultyCommunicator>(
        std::move(*c), std::make_shared<fault::FaultInjector>(*parsed)));
  }
  return comms;
}

// One all-reduce on both ranks; returns the statuses, checks the sum when
// both succeed.
std::vector<absl::Status> AllReduceOnBoth(
    std::vector<std::unique_ptr<Communicator>>& comms) {
  std::vector<std::vector<char>> inputs, bufs;
  for (int r = 0; r < 2; ++r) {
    inputs.push_back(MakeInput(3, r, kCount, DType::kFloat32));
  }
  bufs = inputs;
  std::vector<CollectiveOp> ops;
  for (int r = 0; r < 2; ++r) {
    ops.push_back(comms[r]->AllReduce(bufs[r].data(), kCount, DType::kFloat32));
  }
  std::vector<absl::Status> out;
  for (auto& op : ops) out.push_back(op.Wait());
  if (out[0].ok() && out[1].ok()) {
    const std::vector<char> want = ReferenceSum(inputs, DType::kFloat32);
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(std::memcmp(bufs[r].data(), want.data(), want.size()), 0);
    }
  }
  return out;
}

TEST(FaultyCommunicatorTest, DelaysKeepTheBits) {
  const std::string spec[2] = {"delay=1:2ms,only=AllReduce",
                               "delay=0.5:3ms,only=AllReduce"};
  auto comms = MakePair(spec, absl::Minutes(1));
  for (int i = 0; i < 3; ++i) {
    for (const absl::Status& s : AllReduceOnBoth(comms)) {
      EXPECT_TRUE(s.ok()) << s;
    }
  }
}

TEST(FaultyCommunicatorTest, FailsTheNamedOperationThenStaysBroken) {
  const std::string spec[2] = {"fail_at=AllReduce#2",
                               "fail_at=AllReduce#2:UNAVAILABLE"};
  auto comms = MakePair(spec, absl::Minutes(1));
  for (const absl::Status& s : AllReduceOnBoth(comms)) EXPECT_TRUE(s.ok()) << s;
  const std::vector<absl::Status> second = AllReduceOnBoth(comms);
  EXPECT_EQ(second[0].code(), absl::StatusCode::kInternal);
  EXPECT_EQ(second[0].message(),
            "fault injection: AllReduce on rank 0 failed "
            "(fail_at=AllReduce#2)");
  EXPECT_EQ(second[1].code(), absl::StatusCode::kUnavailable);
  const absl::Status third = comms[0]->Barrier().Wait();
  EXPECT_EQ(third.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(third.message().find("AllReduce on rank 0 failed"),
            std::string::npos)
      << third;
}

TEST(FaultyCommunicatorTest, APeerOfAFailedRankGetsAnErrorNotAHang) {
  const std::string spec[2] = {"", "fail_at=AllReduce#1"};
  auto comms = MakePair(spec, absl::Milliseconds(300));
  const std::vector<absl::Status> s = AllReduceOnBoth(comms);
  EXPECT_EQ(s[1].code(), absl::StatusCode::kInternal);
  EXPECT_EQ(s[0].code(), absl::StatusCode::kDeadlineExceeded) << s[0];
}

}  // namespace
}  // namespace collective
}  // namespace zeroshard
