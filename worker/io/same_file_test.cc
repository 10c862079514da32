#include "worker/io/same_file.h"

#include <unistd.h>

#include <string>

#include "gtest/gtest.h"
#include "worker/io/io_testing.h"

namespace zeroshard::io {
namespace {

class SameFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("same_file_test");
    ASSERT_FALSE(dir_.empty());
    ASSERT_TRUE(testing::WriteBytes(dir_ + "/a", "corpus"));
    ASSERT_TRUE(testing::WriteBytes(dir_ + "/b", "corpus"));
  }
  std::string dir_;
};

TEST_F(SameFileTest, OneFileUnderAnyName) {
  EXPECT_TRUE(SameFile(dir_ + "/a", dir_ + "/a"));
  EXPECT_TRUE(SameFile(dir_ + "/a", dir_ + "/./a"));
  EXPECT_TRUE(SameFile(dir_ + "/a", dir_ + "//a"));
  ASSERT_EQ(link((dir_ + "/a").c_str(), (dir_ + "/hard").c_str()), 0);
  EXPECT_TRUE(SameFile(dir_ + "/a", dir_ + "/hard"));
  ASSERT_EQ(symlink((dir_ + "/a").c_str(), (dir_ + "/soft").c_str()), 0);
  EXPECT_TRUE(SameFile(dir_ + "/soft", dir_ + "/a"));
}

TEST_F(SameFileTest, RelativeSpellingsOfTheWorkingDirectory) {
  char cwd[4096];
  ASSERT_NE(getcwd(cwd, sizeof(cwd)), nullptr);
  ASSERT_EQ(chdir(dir_.c_str()), 0);
  EXPECT_TRUE(SameFile("a", "./a"));
  EXPECT_TRUE(SameFile("a", dir_ + "/a"));
  EXPECT_TRUE(SameFile("new.bin", "./new.bin"));  // neither exists yet
  EXPECT_FALSE(SameFile("new.bin", "./other.bin"));
  ASSERT_EQ(chdir(cwd), 0);
}

TEST_F(SameFileTest, DifferentFiles) {
  EXPECT_FALSE(SameFile(dir_ + "/a", dir_ + "/b"));  // equal bytes only
  EXPECT_FALSE(SameFile(dir_ + "/a", dir_ + "/missing"));
  EXPECT_FALSE(SameFile(dir_ + "/x/a", dir_ + "/y/a"));  // no such dirs
  EXPECT_FALSE(SameFile("", ""));
}

}  // namespace
}  // namespace zeroshard::io
