#include "common/partition.h"

#include <random>

#include "gtest/gtest.h"

namespace zeroshard {
namespace {

std::vector<TensorDesc> RandomTensors(std::mt19937_64& rng, int count,
                                      int max_dim) {
  std::vector<TensorDesc> t;
  for (int i = 0; i < count; ++i) {
    TensorDesc d;
    d.name = "t" + std::to_string(i);
    const int rank = 1 + static_cast<int>(rng() % 3);
    for (int r = 0; r < rank; ++r) {
      d.shape.push_back(1 + static_cast<int64_t>(rng() % max_dim));
    }
    d.param_group = static_cast<uint32_t>(rng() % 2);
    t.push_back(d);
  }
  return t;
}

// Checks every invariant of the plan against brute force.
void CheckPlan(const PartitionPlan& plan, uint32_t workers) {
  const uint64_t total = plan.total();
  const uint32_t k = plan.num_servers();
  const uint32_t align = plan.alignment();
  // Server ranges tile [0, total) in order, aligned and balanced.
  uint64_t expect_begin = 0;
  uint64_t min_units = UINT64_MAX, max_units = 0;
  for (uint32_t s = 0; s < k; ++s) {
    const Range r = plan.ServerRange(s);
    ASSERT_EQ(r.begin, expect_begin) << "server " << s;
    ASSERT_LE(r.begin, r.end);
    if (r.begin != total) {
      ASSERT_EQ(r.begin % align, 0u);
    }
    if (r.end != total) {
      ASSERT_EQ(r.end % align, 0u);
    }
    const uint64_t units = (r.size() + align - 1) / align;
    min_units = std::min(min_units, units);
    max_units = std::max(max_units, units);
    expect_begin = r.end;
  }
  ASSERT_EQ(expect_begin, total);
  // Balanced: unit counts differ by at most one (the last, partial unit
  // counts as a unit).
  ASSERT_LE(max_units - min_units, 1u);
  // OwnerOf agrees with the ranges, sampled densely at boundaries.
  for (uint32_t s = 0; s < k; ++s) {
    const Range r = plan.ServerRange(s);
    if (r.empty()) continue;
    for (uint64_t e : {r.begin, r.end - 1, r.begin + r.size() / 2}) {
      ASSERT_EQ(plan.OwnerOf(e), s) << "element " << e;
    }
  }
  // Tensors tile the space too.
  uint64_t off = 0;
  for (const TensorInfo& t : plan.tensors()) {
    ASSERT_EQ(t.range.begin, off);
    ASSERT_EQ(t.range.size(), t.numel);
    off = t.range.end;
  }
  ASSERT_EQ(off, total);
  // Each worker slice splits into server pieces that tile it exactly, and
  // the pieces of all workers cover every server range exactly once.
  std::vector<uint64_t> covered(k, 0);
  uint64_t slice_begin = 0;
  for (uint32_t w = 0; w < workers; ++w) {
    const Range slice = plan.WorkerSlice(workers, w);
    ASSERT_EQ(slice.begin, slice_begin);
    slice_begin = slice.end;
    uint64_t at = slice.begin;
    for (const ShardPiece& p : plan.Split(slice)) {
      ASSERT_EQ(p.range.begin, at);
      ASSERT_FALSE(p.range.empty());
      ASSERT_TRUE(plan.ServerRange(p.server).Contains(p.range));
      covered[p.server] += p.range.size();
      at = p.range.end;
    }
    ASSERT_EQ(at, slice.end);
  }
  ASSERT_EQ(slice_begin, total);
  for (uint32_t s = 0; s < k; ++s) {
    ASSERT_EQ(covered[s], plan.ServerRange(s).size()) << "server " << s;
  }
  // Every tensor's range splits across the right servers.
  for (size_t i = 0; i < plan.tensors().size(); ++i) {
    const Range tr = plan.tensors()[i].range;
    uint64_t sum = 0;
    for (const ShardPiece& p : plan.Split(tr)) {
      sum += p.range.size();
      ASSERT_EQ(plan.OwnerOf(p.range.begin), p.server);
    }
    ASSERT_EQ(sum, tr.size());
    const std::vector<size_t> in = plan.TensorsIn(tr);
    ASSERT_EQ(in.size(), 1u);
    ASSERT_EQ(in[0], i);
  }
}

TEST(PartitionTest, ManyShapesServersWorkersAlignments) {
  std::mt19937_64 rng(7);
  int plans = 0;
  for (uint32_t align : {1u, 2u, 3u, 64u, 256u}) {
    for (uint32_t k = 1; k <= 9; ++k) {
      for (int count : {1, 2, 5, 17}) {
        for (int max_dim : {1, 3, 50, 1000}) {
          auto plan = PartitionPlan::Create(RandomTensors(rng, count, max_dim),
                                            k, align);
          ASSERT_TRUE(plan.ok()) << plan.status();
          for (uint32_t w : {1u, 2u, 3u, 4u, 7u, 16u}) {
            ASSERT_NO_FATAL_FAILURE(CheckPlan(*plan, w))
                << "K=" << k << " align=" << align << " total=" << plan->total()
                << " W=" << w;
          }
          ++plans;
        }
      }
    }
  }
  EXPECT_EQ(plans, 5 * 9 * 4 * 4);
}

TEST(PartitionTest, NotDivisibleByServers) {
  // Ψ = 1000 over K = 3, alignment 64: 16 units -> 6, 5, 5.
  auto plan = PartitionPlan::Create({{"w", {1000}, 0}}, 3, 64);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->ServerRange(0), (Range{0, 384}));
  EXPECT_EQ(plan->ServerRange(1), (Range{384, 704}));
  EXPECT_EQ(plan->ServerRange(2), (Range{704, 1000}));
  EXPECT_EQ(plan->OwnerOf(383), 0u);
  EXPECT_EQ(plan->OwnerOf(384), 1u);
  EXPECT_EQ(plan->OwnerOf(999), 2u);
}

TEST(PartitionTest, TinyModelLeavesServersEmpty) {
  // 3 elements, alignment 64, 4 servers: server 0 owns all.
  auto plan = PartitionPlan::Create({{"a", {1}, 0}, {"b", {2}, 1}}, 4, 64);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->total(), 3u);
  EXPECT_EQ(plan->ServerRange(0), (Range{0, 3}));
  for (uint32_t s = 1; s < 4; ++s) EXPECT_TRUE(plan->ServerRange(s).empty());
  const auto pieces = plan->Split(Range{1, 3});
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].server, 0u);
  EXPECT_EQ(pieces[0].range, (Range{1, 3}));
}

TEST(PartitionTest, SplitClampsAndCrossesServers) {
  auto plan = PartitionPlan::Create({{"w", {10, 10}, 0}}, 4, 8);
  ASSERT_TRUE(plan.ok());
  // 100 elements -> 13 units -> 4,3,3,3 units -> [0,32) [32,56) [56,80)
  // [80,100).
  const auto pieces = plan->Split(Range{30, 500});
  ASSERT_EQ(pieces.size(), 4u);
  EXPECT_EQ(pieces[0].range, (Range{30, 32}));
  EXPECT_EQ(pieces[3].range, (Range{80, 100}));
  EXPECT_TRUE(plan->Split(Range{100, 200}).empty());
  EXPECT_TRUE(plan->Split(Range{5, 5}).empty());
}

TEST(PartitionTest, FindAndTensorsIn) {
  auto plan = PartitionPlan::Create(
      {{"a", {4}, 0}, {"b", {3, 2}, 1}, {"c", {1}, 0}}, 2, 1);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(*plan->FindTensor("b"), 1u);
  EXPECT_EQ(plan->FindTensor("zz").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(plan->TensorsIn(Range{3, 11}), (std::vector<size_t>{0, 1, 2}));
  EXPECT_EQ(plan->TensorsIn(Range{4, 10}), (std::vector<size_t>{1}));
}

TEST(PartitionTest, HashIsStableAndSensitive) {
  auto a = PartitionPlan::Create({{"a", {4}, 0}, {"b", {3}, 1}}, 2, 64);
  auto b = PartitionPlan::Create({{"a", {4}, 0}, {"b", {3}, 1}}, 2, 64);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->Hash(), b->Hash());
  for (auto other :
       {PartitionPlan::Create({{"a", {4}, 0}, {"b", {3}, 1}}, 3, 64),
        PartitionPlan::Create({{"a", {4}, 0}, {"b", {3}, 1}}, 2, 32),
        PartitionPlan::Create({{"a", {4}, 0}, {"c", {3}, 1}}, 2, 64),
        PartitionPlan::Create({{"a", {4}, 0}, {"b", {3}, 0}}, 2, 64),
        PartitionPlan::Create({{"a", {2, 2}, 0}, {"b", {3}, 1}}, 2, 64)}) {
    ASSERT_TRUE(other.ok());
    EXPECT_NE(other->Hash(), a->Hash());
  }
}

TEST(PartitionTest, RejectsBadSpecs) {
  struct Case {
    std::vector<TensorDesc> t;
    uint32_t k, align;
    const char* needle;
  };
  const Case cases[] = {
      {{}, 1, 1, "no tensors"},
      {{{"", {1}, 0}}, 1, 1, "empty name"},
      {{{"a", {1}, 0}, {"a", {2}, 0}}, 1, 1, "appears twice"},
      {{{"a", {}, 0}}, 1, 1, "no dimensions"},
      {{{"a", {3, 0}, 0}}, 1, 1, "dimension 0"},
      {{{"a", {-2}, 0}}, 1, 1, "dimension -2"},
      {{{"a", {1 << 30, 1 << 30}, 0}}, 1, 1, "too large"},
      {{{"a", {1}, 0}}, 0, 1, "num_servers"},
      {{{"a", {1}, 0}}, 1, 0, "alignment"},
  };
  for (const Case& c : cases) {
    auto plan = PartitionPlan::Create(c.t, c.k, c.align);
    ASSERT_FALSE(plan.ok()) << c.needle;
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(plan.status().message().find(c.needle), std::string::npos)
        << plan.status();
  }
}

}  // namespace
}  // namespace zeroshard
