// The engine's fixed geometry: buckets tile the flat space in backward order
// with aligned boundaries, parts tile each bucket, units and the need
// layouts are checked; persistence is per unit; the spec's groups.
#include "worker/engine/zero_plan.h"

#include "common/optim/adamw_hyper.h"
#include "gtest/gtest.h"
#include "worker/engine/optimizer.h"

namespace zeroshard::engine {
namespace {

TEST(ZeroPlanTest, BucketsTileTheSpaceDescendingWithAlignedBoundaries) {
  const std::vector<Range> b = GradientBuckets(1000, 300, 64);  // S = 320
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b[0], (Range{960, 1000}));
  EXPECT_EQ(b[1], (Range{640, 960}));
  EXPECT_EQ(b[3], (Range{0, 320}));
  for (int w : {1, 2, 3, 5}) {
    for (const Range& r : b) {
      uint64_t next = r.begin;
      for (int k = 0; k < w; ++k) {
        const Range p = PartOf(r, w, k, 64);
        EXPECT_EQ(p.begin, next);
        if (p.begin != r.end) {
          EXPECT_EQ(p.begin % 64, 0u);
        }
        next = p.end;
      }
      EXPECT_EQ(next, r.end);
    }
  }
}

TEST(ZeroPlanTest, LayoutsAreCheckedAndPersistenceIsPerUnit) {
  // Three units: {w1, b1}, {w2}, {b2}.
  const std::vector<TensorDesc> t = {
      {"w1", {4, 8}, 0}, {"b1", {4}, 1}, {"w2", {2, 4}, 0}, {"b2", {2}, 1}};
  auto layout = MakeModelLayout(t, {2, 1, 1}, {0, 1, 2, 2, 1, 0});
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->num_params(), 46u);
  EXPECT_EQ(layout->units, (std::vector<Range>{{0, 36}, {36, 44}, {44, 46}}));
  EXPECT_EQ(layout->tensors[2].range, (Range{36, 44}));
  EXPECT_EQ(PersistentElements(*layout, 0), 0u);
  EXPECT_EQ(PersistentElements(*layout, 8), 10u);
  EXPECT_TRUE(IsPersistent(layout->units[2], 2));
  EXPECT_FALSE(IsPersistent(layout->units[0], 35));
  // Bad layouts name the problem.
  EXPECT_FALSE(MakeModelLayout(t, {2, 1}, {}).ok());      // b2 in no unit
  EXPECT_FALSE(MakeModelLayout(t, {2, 1, 2}, {}).ok());   // past the end
  EXPECT_FALSE(MakeModelLayout(t, {2, 1, 1}, {3}).ok());  // no unit 3
  EXPECT_FALSE(MakeModelLayout({{"z", {0, 3}, 0}}, {1}, {}).ok());
  absl::Status s = MakeModelLayout({{"g", {3}, 2}}, {1}, {}).status();
  EXPECT_NE(s.message().find("parameter group 2"), std::string::npos) << s;

  ZeroOptions o;
  o.weight_decay = 0.1;
  const v1::ModelSpec spec = ZeroModelSpec(*layout, o, 2, 64);
  ASSERT_EQ(spec.param_groups_size(), 2);
  EXPECT_EQ(spec.param_groups(0).weight_decay(), 0.1);
  EXPECT_EQ(spec.param_groups(1).weight_decay(), 0.0);
  ASSERT_EQ(spec.tensors_size(), 4);
  EXPECT_EQ(spec.tensors(1).param_group(), 1u);
  const AdamWHyper h = GroupAdamWHyper(spec.param_groups(0), 3e-4, 0.5f, 7);
  EXPECT_EQ(h.lr, 3e-4);  // kept in double, as Python passes it to torch
  EXPECT_EQ(h.grad_scale, 0.5f);
  EXPECT_EQ(h.step, 7);
}

// All-gather buckets: runs of adjacent units up to the size; a unit larger
// than the size alone; a gap (units not adjacent) starts a new bucket.
TEST(ZeroPlanTest, GatherBucketsGroupAdjacentUnitsUpToTheSize) {
  const std::vector<Range> units = {{0, 10},   {10, 30},   {30, 35},
                                    {35, 100}, {100, 104}, {200, 210}};
  std::vector<int> of;
  std::vector<Range> b = GatherBuckets(units, 40, &of);
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b[0].begin, 0u);
  EXPECT_EQ(b[0].end, 35u);  // 10 + 20 + 5 <= 40
  EXPECT_EQ(b[1].begin, 35u);
  EXPECT_EQ(b[1].end, 100u);  // 65 > 40: alone
  EXPECT_EQ(b[2].end, 104u);
  EXPECT_EQ(b[3].begin, 200u);  // not adjacent to 104
  EXPECT_EQ(of, (std::vector<int>{0, 0, 0, 1, 2, 3}));
  // Everything adjacent in one bucket; 0: one bucket per unit.
  EXPECT_EQ(GatherBuckets(units, 1000, &of).size(), 2u);
  EXPECT_EQ(GatherBuckets(units, 0, &of).size(), units.size());
  EXPECT_EQ(of, (std::vector<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_TRUE(GatherBuckets({}, 10, &of).empty());
  EXPECT_TRUE(of.empty());
}

}  // namespace
}  // namespace zeroshard::engine
