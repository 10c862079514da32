// The engine's fixed geometry: buckets tile the flat space in backward order
// with aligned boundaries, parts tile each bucket, units and the need
// schedule follow the model's parameter hook order; the spec's groups.
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

TEST(ZeroPlanTest, UnitsAndScheduleFollowTheModel) {
  gpt2::Config c{16, 64, 64, 3, 2, 32};
  auto layout = gpt2::ParamLayout::Create(c);
  ASSERT_TRUE(layout.ok());
  const std::vector<ParamUnit> units = ParamUnits(*layout);
  ASSERT_EQ(units.size(), 5u);
  uint64_t next = 0;
  for (const ParamUnit& u : units) {
    EXPECT_EQ(u.range.begin, next);
    next = u.range.end;
  }
  EXPECT_EQ(next, layout->num_params());
  using Part = gpt2::GradSegment::Part;
  EXPECT_EQ(UnitIndex(Part::kBlock, 2, 3), 3);
  EXPECT_EQ(UnitIndex(Part::kFinalNorm, -1, 3), 4);
  EXPECT_EQ(NeedSchedule(3),
            (std::vector<int>{0, 1, 2, 3, 4, 0, 4, 0, 3, 2, 1}));

  ZeroOptions o;
  o.weight_decay = 0.1;
  const v1::ModelSpec spec = ZeroModelSpec(*layout, o, 2, 64);
  ASSERT_EQ(spec.param_groups_size(), 2);
  EXPECT_EQ(spec.param_groups(0).weight_decay(), 0.1);
  EXPECT_EQ(spec.param_groups(1).weight_decay(), 0.0);
  EXPECT_EQ(spec.tensors_size(), static_cast<int>(layout->tensors().size()));
  const AdamWHyper h = GroupAdamWHyper(spec.param_groups(0), 3e-4, 0.5f, 7);
  EXPECT_EQ(h.lr, static_cast<float>(3e-4));
  EXPECT_EQ(h.grad_scale, 0.5f);
  EXPECT_EQ(h.step, 7);
}

}  // namespace
}  // namespace zeroshard::engine
