// HostCommunicator over the in-process transport: every op, fp32 and bf16,
// W in {1,2,3,4}, awkward lengths, against the reference order of
// testing.h, bit for bit; the hierarchical schedule; errors; overlap.
#include "worker/collective/host_communicator.h"

#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/collective/inprocess_transport.h"
#include "worker/collective/testing.h"

namespace zeroshard {
namespace collective {
namespace {

using Buffers = std::vector<std::vector<char>>;

struct Group {
  std::shared_ptr<InProcessHub> hub;
  std::vector<std::unique_ptr<HostCommunicator>> comms;
};

Group MakeGroup(int w, HostCommunicatorOptions options = {}) {
  Group g;
  g.hub = std::make_shared<InProcessHub>(w);
  for (int r = 0; r < w; ++r) {
    auto c = HostCommunicator::Create(g.hub->MakeTransport(r), options);
    EXPECT_TRUE(c.ok()) << c.status();
    g.comms.push_back(std::move(*c));
  }
  return g;
}

Buffers Inputs(int w, uint64_t count, DType dtype, uint64_t seed = 7) {
  Buffers b;
  for (int r = 0; r < w; ++r) b.push_back(MakeInput(seed, r, count, dtype));
  return b;
}

// Issues one op on every rank (all from this thread: the ops run on the
// communicators' progress threads) and waits for all.
template <typename F>
void OnAll(Group& g, F issue) {
  std::vector<CollectiveOp> ops;
  for (size_t r = 0; r < g.comms.size(); ++r) {
    ops.push_back(issue(static_cast<int>(r), *g.comms[r]));
  }
  for (size_t r = 0; r < ops.size(); ++r) {
    ASSERT_TRUE(ops[r].Wait().ok()) << "rank " << r << ": " << ops[r].Wait();
  }
}

bool SameBytes(const char* a, const char* b, size_t n) {
  return n == 0 || std::memcmp(a, b, n) == 0;
}

void CheckAllOps(int w, uint64_t count, DType dtype, uint32_t alignment) {
  SCOPED_TRACE(absl::StrCat("W=", w, " count=", count, " ", DTypeName(dtype),
                            " alignment=", alignment));
  const size_t es = DTypeSize(dtype);
  HostCommunicatorOptions options;
  options.part_alignment = alignment;
  Group g = MakeGroup(w, options);
  const Buffers in = Inputs(w, count, dtype);
  const std::vector<char> want = ReferenceSum(in, dtype);

  Buffers ar = in;
  OnAll(g, [&](int r, Communicator& c) {
    return c.AllReduce(ar[r].data(), count, dtype);
  });
  for (int r = 0; r < w; ++r) {
    EXPECT_TRUE(SameBytes(ar[r].data(), want.data(), want.size()))
        << "AllReduce differs from the reference on rank " << r;
  }

  Buffers rs = in;
  std::vector<OpStats> stats(w);
  OnAll(g, [&](int r, Communicator& c) {
    return c.ReduceScatter(rs[r].data(), count, dtype);
  });
  for (int r = 0; r < w; ++r) {
    const Range p = g.comms[r]->PartRange(count, r);
    EXPECT_TRUE(SameBytes(rs[r].data() + p.begin * es,
                          want.data() + p.begin * es, p.size() * es))
        << "ReduceScatter part differs on rank " << r;
  }
  // Byte counts: (N - |P_r|) sent, (W-1)·|P_r| received, as a ring.
  std::vector<CollectiveOp> ops;
  Buffers rs2 = in;
  for (int r = 0; r < w; ++r) {
    ops.push_back(g.comms[r]->ReduceScatter(rs2[r].data(), count, dtype));
  }
  for (int r = 0; r < w; ++r) {
    ASSERT_TRUE(ops[r].Wait().ok());
    const uint64_t part = g.comms[r]->PartRange(count, r).size();
    EXPECT_EQ(ops[r].stats().bytes_sent, (count - part) * es);
    EXPECT_EQ(ops[r].stats().bytes_received, (w - 1) * part * es);
  }

  // ReduceScatter + AllGather == AllReduce, bitwise.
  OnAll(g, [&](int r, Communicator& c) {
    return c.AllGather(rs[r].data(), count, dtype);
  });
  for (int r = 0; r < w; ++r) {
    EXPECT_TRUE(SameBytes(rs[r].data(), ar[r].data(), ar[r].size()))
        << "ReduceScatter+AllGather != AllReduce on rank " << r;
  }

  Buffers bc = in;
  const int root = w - 1;
  OnAll(g, [&](int r, Communicator& c) {
    return c.Broadcast(bc[r].data(), count, dtype, root);
  });
  for (int r = 0; r < w; ++r) {
    EXPECT_TRUE(SameBytes(bc[r].data(), in[root].data(), in[root].size()))
        << "Broadcast differs on rank " << r;
  }
  OnAll(g, [&](int r, Communicator& c) { return c.Barrier(); });
}

TEST(HostCommunicatorTest, EveryOpMatchesTheReference) {
  for (int w = 1; w <= 4; ++w) {
    for (DType dtype : {DType::kFloat32, DType::kBfloat16}) {
      for (uint64_t count : {0ull, 1ull, static_cast<unsigned long long>(w - 1),
                             1001ull, 4099ull}) {
        CheckAllOps(w, count, dtype, 1);
      }
      CheckAllOps(w, 4099, dtype, 64);
    }
  }
}

TEST(HostCommunicatorTest, LargeBuffers) {
  // ~3 MiB of fp32 / 1.5 MiB of bf16, not a multiple of W or of 64.
  for (DType dtype : {DType::kFloat32, DType::kBfloat16}) {
    CheckAllOps(3, (3 << 18) + 5, dtype, 64);
    CheckAllOps(4, (3 << 18) + 5, dtype, 1);
  }
}

TEST(HostCommunicatorTest, ReferenceTellsOrdersApart) {
  const Buffers in = Inputs(4, 4096, DType::kFloat32);
  EXPECT_NE(ReferenceSum(in, DType::kFloat32),
            SequentialSum(in, DType::kFloat32));
}

// Hierarchical (M nodes x G local ranks) against flat, bitwise.
void CheckHierarchical(int w, int local_size, DType dtype, bool equal_flat) {
  SCOPED_TRACE(absl::StrCat("W=", w, " G=", local_size, " ", DTypeName(dtype)));
  const uint64_t count = 10007;
  const size_t es = DTypeSize(dtype);
  HostCommunicatorOptions options;
  options.local_size = local_size;
  options.part_alignment = 8;
  Group g = MakeGroup(w, options);
  const Buffers in = Inputs(w, count, dtype, 11);
  const std::vector<char> want = ReferenceSum(in, dtype, local_size);
  const std::vector<char> flat = ReferenceSum(in, dtype);
  EXPECT_EQ(want == flat, equal_flat);

  Buffers ar = in, rs = in;
  OnAll(g, [&](int r, Communicator& c) {
    return c.AllReduce(ar[r].data(), count, dtype);
  });
  std::vector<CollectiveOp> ops;
  for (int r = 0; r < w; ++r) {
    ops.push_back(g.comms[r]->ReduceScatter(rs[r].data(), count, dtype));
  }
  const int nodes = w / local_size;
  for (int r = 0; r < w; ++r) {
    ASSERT_TRUE(ops[r].Wait().ok());
    const Range p = g.comms[r]->PartRange(count, r);
    EXPECT_TRUE(SameBytes(rs[r].data() + p.begin * es,
                          want.data() + p.begin * es, p.size() * es));
    // In the node: the parts of the node peers; across: fp32 partials of
    // the own part to each other node.
    const int local = r % local_size;
    uint64_t slice = 0;  // what this rank reduces inside the node
    for (int n = 0; n < nodes; ++n) {
      slice += g.comms[r]->PartRange(count, n * local_size + local).size();
    }
    EXPECT_EQ(ops[r].stats().bytes_received,
              (local_size - 1) * slice * es + (nodes - 1) * p.size() * 4);
  }
  OnAll(g, [&](int r, Communicator& c) {
    return c.AllGather(rs[r].data(), count, dtype);
  });
  for (int r = 0; r < w; ++r) {
    EXPECT_TRUE(SameBytes(ar[r].data(), want.data(), want.size()));
    EXPECT_TRUE(SameBytes(rs[r].data(), want.data(), want.size()));
  }
}

TEST(HostCommunicatorTest, HierarchicalEqualsFlatForPowerOfTwoNodes) {
  for (DType dtype : {DType::kFloat32, DType::kBfloat16}) {
    CheckHierarchical(4, 2, dtype, true);
    CheckHierarchical(6, 2, dtype, true);
    CheckHierarchical(8, 4, dtype, true);
  }
}

TEST(HostCommunicatorTest, HierarchicalWithThreeLocalRanksIsNestedTree) {
  CheckHierarchical(6, 3, DType::kFloat32, false);
}

// options.trace: a line per operation as it starts and as it ends, with
// the sequence number, so a hung job's ranks show what they last ran.
TEST(HostCommunicatorTest, TraceNamesEveryOperationAndItsEnd) {
  HostCommunicatorOptions options;
  options.trace = true;
  testing::internal::CaptureStderr();
  {
    Group g = MakeGroup(2, options);
    std::vector<float> a(10), b(10);
    OnAll(g, [](int, HostCommunicator& c) { return c.Barrier(); });
    CollectiveOp x = g.comms[0]->AllReduce(a.data(), 10, DType::kFloat32);
    CollectiveOp y = g.comms[1]->AllReduce(b.data(), 11, DType::kFloat32);
    EXPECT_FALSE(x.Wait().ok());
    EXPECT_FALSE(y.Wait().ok());
  }
  const std::string err = testing::internal::GetCapturedStderr();
  for (const char* want :
       {"collective: rank 0 #0 Barrier (count 0, fp32) start",
        "collective: rank 1 #0 ok",
        "collective: rank 1 #1 AllReduce (count "
        "11, fp32) start",
        "collective: rank 0 #1 error: INVALID_ARGUMENT: collective mismatch"}) {
    EXPECT_NE(err.find(want), std::string::npos) << want << " in\n" << err;
  }
}

TEST(HostCommunicatorTest, MismatchedCountsFailWithBothCalls) {
  Group g = MakeGroup(2);
  std::vector<float> a(10), b(11);
  CollectiveOp x = g.comms[0]->AllReduce(a.data(), 10, DType::kFloat32);
  CollectiveOp y = g.comms[1]->AllReduce(b.data(), 11, DType::kFloat32);
  absl::Status s = x.Wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("rank 1"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("count=11"), absl::string_view::npos) << s;
  EXPECT_EQ(y.Wait().code(), absl::StatusCode::kInvalidArgument);
  // The communicator is broken from now on.
  EXPECT_EQ(g.comms[0]->Barrier().Wait().code(),
            absl::StatusCode::kFailedPrecondition);
}

// AllGatherMany equals one AllGather per segment, byte for byte, flat and
// two-level, with uneven, tiny and empty segments; its stats count every
// segment's bytes.
TEST(HostCommunicatorTest, AllGatherManyEqualsOneAllGatherPerSegment) {
  const std::vector<uint64_t> counts = {1000, 3, 0, 257, 64};
  for (auto [w, local] :
       {std::pair{4, 2}, std::pair{4, 1}, std::pair{3, 1}, std::pair{6, 3}}) {
    SCOPED_TRACE(absl::StrCat("W=", w, " local_size=", local));
    HostCommunicatorOptions options;
    options.local_size = local;
    options.part_alignment = 2;
    Group g = MakeGroup(w, options);
    // Rank r's own parts hold its input; the rest is garbage it must
    // overwrite. `want`: the same through one AllGather per segment.
    std::vector<std::vector<std::vector<float>>> got(w), want(w);
    for (int r = 0; r < w; ++r) {
      for (size_t s = 0; s < counts.size(); ++s) {
        std::vector<float> v(counts[s]);
        for (uint64_t i = 0; i < counts[s]; ++i) {
          v[i] = static_cast<float>(1000 * r + 10 * s + i % 7);
        }
        got[r].push_back(v);
        want[r].push_back(v);
      }
    }
    OnAll(g, [&](int r, HostCommunicator& c) {
      std::vector<Communicator::Segment> segs;
      for (auto& v : got[r]) segs.push_back({v.data(), v.size()});
      return c.AllGatherMany(segs, DType::kFloat32);
    });
    for (size_t s = 0; s < counts.size(); ++s) {
      OnAll(g, [&](int r, HostCommunicator& c) {
        return c.AllGather(want[r][s].data(), counts[s], DType::kFloat32);
      });
    }
    for (int r = 0; r < w; ++r) {
      for (size_t s = 0; s < counts.size(); ++s) {
        EXPECT_EQ(got[r][s], want[r][s]) << "rank " << r << " segment " << s;
      }
    }
    // Bytes: what the per-segment ops moved, summed.
    std::vector<float> a(10), b(20);
    std::vector<CollectiveOp> many, one;
    for (int r = 0; r < w; ++r) {
      many.push_back(g.comms[r]->AllGatherMany({{a.data(), 10}, {b.data(), 20}},
                                               DType::kFloat32));
    }
    for (auto& op : many) ASSERT_TRUE(op.Wait().ok());
    for (int r = 0; r < w; ++r) {
      one.push_back(g.comms[r]->AllGather(a.data(), 10, DType::kFloat32));
    }
    for (auto& op : one) ASSERT_TRUE(op.Wait().ok());
    uint64_t first = one[0].stats().bytes_sent;
    one.clear();
    for (int r = 0; r < w; ++r) {
      one.push_back(g.comms[r]->AllGather(b.data(), 20, DType::kFloat32));
    }
    for (auto& op : one) ASSERT_TRUE(op.Wait().ok());
    EXPECT_EQ(many[0].stats().bytes_sent, first + one[0].stats().bytes_sent);
  }
}

TEST(HostCommunicatorTest, AllGatherManyWithOtherSegmentsFails) {
  Group g = MakeGroup(2);
  std::vector<float> a(30);
  CollectiveOp x = g.comms[0]->AllGatherMany(
      {{a.data(), 10}, {a.data() + 10, 20}}, DType::kFloat32);
  CollectiveOp y = g.comms[1]->AllGatherMany(
      {{a.data(), 10}, {a.data() + 10, 10}, {a.data() + 20, 10}},
      DType::kFloat32);
  absl::Status s = x.Wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("3 segments"), absl::string_view::npos) << s;
  EXPECT_EQ(y.Wait().code(), absl::StatusCode::kInvalidArgument);
}

TEST(HostCommunicatorTest, MismatchedDtypeFails) {
  Group g = MakeGroup(2);
  std::vector<float> a(8);
  CollectiveOp x = g.comms[0]->AllGather(a.data(), 8, DType::kFloat32);
  CollectiveOp y = g.comms[1]->AllGather(a.data(), 8, DType::kBfloat16);
  EXPECT_EQ(x.Wait().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(x.Wait().message().find("bf16"), absl::string_view::npos);
  (void)y.Wait();
}

TEST(HostCommunicatorTest, DeadPeerFailsPendingOpsNamingIt) {
  Group g = MakeGroup(3);
  std::vector<float> a(100), b(100);
  CollectiveOp x = g.comms[0]->AllReduce(a.data(), 100, DType::kFloat32);
  CollectiveOp y = g.comms[1]->AllReduce(b.data(), 100, DType::kFloat32);
  g.hub->Kill(2);
  absl::Status s = x.Wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("rank 2"), absl::string_view::npos) << s;
  EXPECT_EQ(y.Wait().code(), absl::StatusCode::kUnavailable);
}

TEST(HostCommunicatorTest, SilentPeerTimesOutNamingIt) {
  HostCommunicatorOptions options;
  options.op_timeout = absl::Milliseconds(200);
  Group g = MakeGroup(3, options);
  std::vector<float> a(10), b(10);
  CollectiveOp x = g.comms[0]->AllReduce(a.data(), 10, DType::kFloat32);
  CollectiveOp y = g.comms[1]->AllReduce(b.data(), 10, DType::kFloat32);
  absl::Status s = x.Wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("rank 2"), absl::string_view::npos) << s;
  EXPECT_EQ(s.message().find("rank 1"), absl::string_view::npos) << s;
  (void)y.Wait();
}

TEST(HostCommunicatorTest, BadArgumentsFailAtIssue) {
  Group g = MakeGroup(2);
  EXPECT_EQ(g.comms[0]->AllReduce(nullptr, 4, DType::kFloat32).Wait().code(),
            absl::StatusCode::kInvalidArgument);
  float x = 0;
  EXPECT_EQ(g.comms[0]->Broadcast(&x, 1, DType::kFloat32, 2).Wait().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      HostCommunicator::Create(g.hub->MakeTransport(0), {1, 3}).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(HostCommunicatorTest, DestructionCancelsPendingOps) {
  CollectiveOp x;
  std::vector<float> a(10);
  {
    Group g = MakeGroup(2);
    x = g.comms[0]->AllReduce(a.data(), 10, DType::kFloat32);
  }
  EXPECT_EQ(x.Wait().code(), absl::StatusCode::kCancelled);
}

// Overlap: ops complete on the progress threads while the issuing thread
// keeps computing and never calls Wait; completion follows issue order.
TEST(HostCommunicatorTest, OpsProgressWithoutWaitAndInIssueOrder) {
  const int w = 3;
  const uint64_t count = 1 << 16;
  Group g = MakeGroup(w);
  Buffers buf = Inputs(w, count, DType::kFloat32);
  std::vector<std::vector<CollectiveOp>> ops(w);
  for (int k = 0; k < 3; ++k) {
    for (int r = 0; r < w; ++r) {
      ops[r].push_back(
          g.comms[r]->AllReduce(buf[r].data(), count, DType::kFloat32));
    }
  }
  // "Compute" until the last op of every rank is done, without Wait(). The
  // ops may all be done before the first check; volatile keeps the loop.
  volatile double sink = 0;
  auto all_done = [&] {
    for (int r = 0; r < w; ++r) {
      if (!ops[r].back().Done()) return false;
    }
    return true;
  };
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  while (!all_done() && absl::Now() < give_up) {
    for (int i = 0; i < 100000; ++i) sink = sink + i * 1e-9;
  }
  ASSERT_TRUE(all_done()) << "ops made no progress while the caller computed";
  for (int r = 0; r < w; ++r) {
    for (const CollectiveOp& op : ops[r]) EXPECT_TRUE(op.Done());
    for (const CollectiveOp& op : ops[r]) EXPECT_TRUE(op.Wait().ok());
  }
}

// The hub's link model: the same results, and a message is not received
// before its bytes have crossed the emulated link (a lower bound that holds
// by construction, however loaded the machine).
TEST(HostCommunicatorTest, LinkModelDelaysButDoesNotChangeResults) {
  const int w = 2;
  const uint64_t count = 1 << 18;  // 1 MiB of fp32
  Buffers plain = Inputs(w, count, DType::kFloat32);
  Buffers linked = plain;
  Group fast = MakeGroup(w);
  OnAll(fast, [&](int r, HostCommunicator& c) {
    return c.AllReduce(plain[r].data(), count, DType::kFloat32);
  });
  Group slow = MakeGroup(w);
  const double bandwidth = 50e6;  // bytes per second
  slow.hub->SetLink(bandwidth, absl::Milliseconds(1));
  const absl::Time start = absl::Now();
  OnAll(slow, [&](int r, HostCommunicator& c) {
    return c.AllReduce(linked[r].data(), count, DType::kFloat32);
  });
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  for (int r = 0; r < w; ++r) {
    EXPECT_TRUE(SameBytes(plain[r].data(), linked[r].data(), 4 * count));
  }
  // An all-reduce of W = 2 sends half the buffer each way twice
  // (reduce-scatter, all-gather), one after the other.
  const double wire = 2 * (2.0 * count) / bandwidth;
  std::printf("all-reduce over the emulated link: %.1f ms (wire %.1f ms)\n",
              1e3 * seconds, 1e3 * wire);
  EXPECT_GE(seconds, wire);
}

}  // namespace
}  // namespace collective
}  // namespace zeroshard
