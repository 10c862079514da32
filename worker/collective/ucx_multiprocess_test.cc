// Real processes over UCX on loopback: W = 2 and 4 flat, 2 nodes x 2
// hierarchical, and a peer that dies. Each process (collective_worker)
// writes checksums and byte counts; this test compares them with the
// reference order of testing.h and with the direct-exchange byte formulas
// (equal to a ring's).
#include <sys/stat.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/partition.h"
#include "common/subprocess.h"
#include "gtest/gtest.h"
#include "worker/collective/collective.h"
#include "worker/collective/testing.h"

namespace zeroshard {
namespace collective {
namespace {

struct Config {
  int world = 2;
  int local_size = 1;
  DType dtype = DType::kFloat32;
  uint64_t count = 100003;
  uint32_t alignment = 1;
  int dying_rank = -1;
};

// op name -> fields after the name, per rank.
using Results = std::vector<std::map<std::string, std::vector<std::string>>>;

std::string TempDir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d != nullptr ? d : "/tmp";
}

Results RunRanks(const Config& c, const std::string& name) {
  auto binary = FindBinary("collective_worker", {"."});
  EXPECT_TRUE(binary.ok()) << binary.status();
  const std::string dir = TempDir() + "/" + name;
  mkdir(dir.c_str(), 0755);
  const std::string port_file = dir + "/port";
  std::remove(port_file.c_str());
  auto args = [&](int r, const std::string& coord) {
    std::vector<std::string> a = {
        *binary,
        absl::StrCat("--rank=", r),
        absl::StrCat("--world=", c.world),
        absl::StrCat("--local_size=", c.local_size),
        absl::StrCat("--count=", c.count),
        absl::StrCat("--alignment=", c.alignment),
        std::string("--dtype=") + DTypeName(c.dtype),
        "--coord=" + coord,
        absl::StrCat("--out=", dir, "/rank", r, ".txt"),
        "--op_timeout_ms=20000"};
    if (r == 0) a.push_back("--port_file=" + port_file);
    if (r == c.dying_rank) a.push_back("--exit_after_connect");
    return a;
  };
  std::vector<Subprocess> procs;
  auto spawn = [&](int r, const std::string& coord) {
    SpawnOptions o;
    o.argv = args(r, coord);
    o.log_path = absl::StrCat(dir, "/rank", r, ".log");
    auto p = Subprocess::Spawn(o);
    EXPECT_TRUE(p.ok()) << p.status();
    procs.push_back(std::move(*p));
  };
  spawn(0, "127.0.0.1:0");
  std::string port;
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (port.empty() && absl::Now() < give_up) {
    std::ifstream(port_file) >> port;
    if (port.empty()) absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_FALSE(port.empty()) << "rank 0 wrote no port";
  for (int r = 1; r < c.world; ++r) spawn(r, "127.0.0.1:" + port);
  Results results(c.world);
  for (int r = 0; r < c.world; ++r) {
    auto status = procs[r].Wait(std::chrono::seconds(60));
    EXPECT_TRUE(status.ok()) << "rank " << r << " hangs";
    if (r != c.dying_rank && status.ok()) {
      EXPECT_EQ(*status, 0)
          << "rank " << r << ": " << DescribeWaitStatus(*status);
    }
    std::ifstream in(absl::StrCat(dir, "/rank", r, ".txt"));
    std::string line;
    while (std::getline(in, line)) {
      // "<op> OK a b c" or "<op> ERROR <code> <message with spaces>"
      std::vector<std::string> f =
          absl::StrSplit(line, absl::MaxSplits(' ', 3));
      if (f.size() > 1 && f[1] == "OK") f = absl::StrSplit(line, ' ');
      results[r][f[0]] = std::vector<std::string>(f.begin() + 1, f.end());
    }
  }
  return results;
}

void ExpectOk(const Results& res, int r, const std::string& op, uint64_t sent,
              uint64_t received, uint64_t fnv) {
  SCOPED_TRACE(absl::StrCat("rank ", r, " ", op));
  auto it = res[r].find(op);
  ASSERT_NE(it, res[r].end()) << "no result";
  const std::vector<std::string>& f = it->second;
  ASSERT_EQ(f[0], "OK") << absl::StrJoin(f, " ");
  EXPECT_EQ(f[1], std::to_string(sent));
  EXPECT_EQ(f[2], std::to_string(received));
  EXPECT_EQ(f[3], std::to_string(fnv)) << "result bits differ";
}

void Check(const Config& c, const std::string& name) {
  const Results res = RunRanks(c, name);
  const size_t es = DTypeSize(c.dtype);
  const int w = c.world;
  const int g = c.local_size == 1 ? w : c.local_size, nodes = w / g;
  std::vector<std::vector<char>> in;
  for (int r = 0; r < w; ++r) in.push_back(MakeInput(7, r, c.count, c.dtype));
  const std::vector<char> sum = ReferenceSum(in, c.dtype, c.local_size);
  const uint64_t full = Fnv1a(sum.data(), sum.size());
  const uint64_t n = c.count;
  for (int r = 0; r < w; ++r) {
    const Range p = AlignedPartRange(n, w, r, c.alignment);
    uint64_t slice = 0;  // what rank r reduces inside its node
    for (int m = 0; m < nodes; ++m) {
      slice += AlignedPartRange(n, w, m * g + r % g, c.alignment).size();
    }
    // ReduceScatter: node peers' slices in, fp32 partials across nodes.
    const uint64_t rs_sent = (n - slice) * es + (slice - p.size()) * 4;
    const uint64_t rs_recv = (g - 1) * slice * es + (nodes - 1) * p.size() * 4;
    // AllGather: every byte not held arrives once; the own slice leaves.
    const uint64_t ag_sent = (nodes - 1) * p.size() * es + (g - 1) * slice * es;
    const uint64_t ag_recv = (n - p.size()) * es;
    ExpectOk(res, r, "allreduce", rs_sent + ag_sent, rs_recv + ag_recv, full);
    ExpectOk(res, r, "reducescatter", rs_sent, rs_recv,
             Fnv1a(sum.data() + p.begin * es, p.size() * es));
    ExpectOk(res, r, "allgather", ag_sent, ag_recv, full);
    if (g == w) {  // flat: exactly the ring's (W-1)/W·N per rank and op
      EXPECT_EQ(rs_sent, (n - p.size()) * es);
      EXPECT_EQ(rs_recv, (w - 1) * p.size() * es);
    }
    const uint64_t bc_recv = r == w - 1 ? ag_recv : ag_recv + p.size() * es;
    const uint64_t bc_sent =
        r == w - 1 ? ag_sent + (n - p.size()) * es : ag_sent;
    ExpectOk(res, r, "broadcast", bc_sent, bc_recv,
             Fnv1a(in[w - 1].data(), in[w - 1].size()));
    ExpectOk(res, r, "connect", 0, 0, Fnv1a(nullptr, 0));
    ExpectOk(res, r, "barrier", 0, 0, Fnv1a(nullptr, 0));
  }
}

TEST(UcxMultiprocessTest, TwoRanksFp32) {
  Config c;
  c.world = 2;
  Check(c, "w2");
}

TEST(UcxMultiprocessTest, FourRanksBf16Aligned) {
  Config c;
  c.world = 4;
  c.dtype = DType::kBfloat16;
  c.alignment = 64;
  Check(c, "w4");
}

TEST(UcxMultiprocessTest, TinyBuffersWithEmptyParts) {
  Config c;
  c.world = 4;
  c.count = 3;  // W-1 elements: eager messages, one empty part
  Check(c, "tiny");
}

TEST(UcxMultiprocessTest, TwoNodesOfTwoEqualsFlat) {
  Config c;
  c.world = 4;
  c.local_size = 2;
  std::vector<std::vector<char>> in;
  for (int r = 0; r < 4; ++r) in.push_back(MakeInput(7, r, c.count, c.dtype));
  ASSERT_EQ(ReferenceSum(in, c.dtype, 2), ReferenceSum(in, c.dtype));
  Check(c, "hier");
  c.dtype = DType::kBfloat16;
  Check(c, "hier_bf16");
}

TEST(UcxMultiprocessTest, DeadPeerFailsOpsNamingIt) {
  Config c;
  c.world = 3;
  c.dying_rank = 2;
  const Results res = RunRanks(c, "dead");
  // Every survivor fails (never hangs) naming a peer; rank 2 is named by at
  // least one (a survivor that gave up first closes its endpoints, so the
  // other may see it leave first).
  bool named = false;
  for (int r = 0; r < 2; ++r) {
    auto it = res[r].find("allreduce");
    ASSERT_NE(it, res[r].end()) << "rank " << r << " reported nothing";
    const std::vector<std::string>& f = it->second;
    ASSERT_EQ(f[0], "ERROR");
    // Detected by UCX (UNAVAILABLE) or by the op timeout.
    EXPECT_TRUE(f[1] == "UNAVAILABLE" || f[1] == "DEADLINE_EXCEEDED") << f[1];
    EXPECT_NE(f[2].find("AllReduce #1"), std::string::npos) << f[2];
    named |= f[2].find("rank 2") != std::string::npos;
    std::cerr << "rank " << r << ": " << absl::StrJoin(f, " ") << "\n";
  }
  EXPECT_TRUE(named) << "no survivor named the dead rank 2";
}

}  // namespace
}  // namespace collective
}  // namespace zeroshard
