#include "common/edit_distance.h"

#include "gtest/gtest.h"

namespace zeroshard {
namespace {

TEST(EditDistanceTest, CountsEditsAndSwapsOfNeighbours) {
  EXPECT_EQ(EditDistance("steps", "steps"), 0);
  EXPECT_EQ(EditDistance("stpes", "steps"), 1);  // a swap
  EXPECT_EQ(EditDistance("zero_optimisation", "zero_optimization"), 1);
  EXPECT_EQ(EditDistance("enabld", "enabled"), 1);  // an insertion
  EXPECT_EQ(EditDistance("lr", "learning_rate"), 11);
  EXPECT_EQ(EditDistance("", "abc"), 3);
  EXPECT_EQ(EditDistance("abc", ""), 3);
}

TEST(EditDistanceTest, IgnoresAsciiCase) {
  EXPECT_EQ(EditDistance("Train_Batch_Size", "train_batch_size"), 0);
}

TEST(EditDistanceTest, IsSymmetric) {
  EXPECT_EQ(EditDistance("reduce_bucket", "reduce_bucket_size"),
            EditDistance("reduce_bucket_size", "reduce_bucket"));
}

}  // namespace
}  // namespace zeroshard
