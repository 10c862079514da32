#include "worker/elastic/batch_policy.h"

#include "gtest/gtest.h"

namespace zeroshard::elastic {
namespace {

TEST(BatchPolicyTest, DividingSizesKeepTheGlobalBatch) {
  for (BatchPolicy p : {BatchPolicy::kRescale, BatchPolicy::kRefuse}) {
    EXPECT_EQ(*AccumulationSteps(8, 1, p), 8);
    EXPECT_EQ(*AccumulationSteps(8, 2, p), 4);
    EXPECT_EQ(*AccumulationSteps(8, 8, p), 1);
  }
}

TEST(BatchPolicyTest, RescaleRoundsToNearestAtLeastOne) {
  EXPECT_EQ(*AccumulationSteps(8, 3, BatchPolicy::kRescale), 3);  // 9
  EXPECT_EQ(*AccumulationSteps(8, 5, BatchPolicy::kRescale), 2);  // 10
  EXPECT_EQ(*AccumulationSteps(8, 7, BatchPolicy::kRescale), 1);  // 7
  EXPECT_EQ(*AccumulationSteps(4, 3, BatchPolicy::kRescale), 1);  // 3
  EXPECT_EQ(*AccumulationSteps(2, 5, BatchPolicy::kRescale), 1);  // 5
}

TEST(BatchPolicyTest, RefuseNamesSizesAndPolicy) {
  absl::StatusOr<int> gas = AccumulationSteps(8, 3, BatchPolicy::kRefuse);
  ASSERT_TRUE(absl::IsFailedPrecondition(gas.status()));
  EXPECT_NE(gas.status().message().find("3 workers"), std::string::npos);
}

TEST(BatchPolicyTest, BadInput) {
  EXPECT_TRUE(absl::IsInvalidArgument(
      AccumulationSteps(0, 2, BatchPolicy::kRescale).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      AccumulationSteps(4, 0, BatchPolicy::kRescale).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseBatchPolicy("keep").status()));
  EXPECT_EQ(*ParseBatchPolicy("refuse"), BatchPolicy::kRefuse);
  EXPECT_STREQ(BatchPolicyName(BatchPolicy::kRescale), "rescale");
}

}  // namespace
}  // namespace zeroshard::elastic
