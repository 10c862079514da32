#include "worker/io/token_file.h"

#include <dirent.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/io/io_testing.h"
#include "worker/io/llmc_header.h"

namespace zeroshard::io {
namespace {

class TokenFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("token_file_test");
    ASSERT_FALSE(dir_.empty());
  }
  int CountEntries() const {
    int n = 0;
    DIR* d = opendir(dir_.c_str());
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
    return n;
  }
  std::string dir_;
};

TEST_F(TokenFileTest, RoundTripAndLayout) {
  std::vector<uint16_t> tokens(1000);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<uint16_t>(i * 7919 % 65536);
  }
  const std::string path = dir_ + "/t.bin";
  ASSERT_TRUE(WriteTokenFile(path, tokens).ok());
  const std::string bytes = testing::ReadBytes(path);
  ASSERT_EQ(bytes.size(), kHeaderBytes + 2 * tokens.size());
  EXPECT_EQ(bytes.substr(0, kHeaderBytes),
            testing::HeaderBytes({kTokenMagic, 1, 1000}));
  EXPECT_EQ(bytes.substr(kHeaderBytes), testing::AsBytes(tokens));

  auto read = ReadTokenFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, tokens);

  auto file = TokenFile::Open(path);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->num_tokens(), 1000);
  std::vector<uint16_t> part(10);
  ASSERT_TRUE(file->Read(990, 10, part.data()).ok());
  EXPECT_EQ(part, std::vector<uint16_t>(tokens.begin() + 990, tokens.end()));
  EXPECT_EQ(file->Read(991, 10, part.data()).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(file->Read(-1, 1, part.data()).code(),
            absl::StatusCode::kOutOfRange);
}

// The id check scans in chunks; a bad id past the first chunk is found and
// reported with its index.
TEST_F(TokenFileTest, CheckIdsFindsBadTokenPastFirstChunk) {
  std::vector<uint16_t> tokens(3 << 19, 5);  // 1.5 Mi tokens
  tokens[(1 << 20) + 123] = 256;
  const std::string path = dir_ + "/big.bin";
  ASSERT_TRUE(WriteTokenFile(path, tokens).ok());
  auto file = TokenFile::Open(path);
  ASSERT_TRUE(file.ok());
  EXPECT_TRUE(file->CheckIds(257).ok());
  const absl::Status s = file->CheckIds(256);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(path + ": token 256 at index 1048699 is not "
                                    "below vocab_size 256"),
            std::string::npos)
      << s;
  EXPECT_TRUE(file->CheckIds(70000).ok());  // every uint16 is below it
}

TEST_F(TokenFileTest, StreamingWriterEnforcesDeclaredCount) {
  const std::string path = dir_ + "/s.bin";
  const std::vector<uint16_t> chunk = {1, 2, 3};
  {
    auto w = TokenFileWriter::Create(path, 5);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->Append(chunk.data(), 3).ok());
    EXPECT_EQ(w->Append(chunk.data(), 3).code(),
              absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(w->Commit().code(), absl::StatusCode::kFailedPrecondition);
  }  // abandoned: nothing left behind
  EXPECT_EQ(CountEntries(), 0);
  auto w = TokenFileWriter::Create(path, 6);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->Append(chunk.data(), 3).ok());
  ASSERT_TRUE(w->Append(chunk.data(), 3).ok());
  ASSERT_TRUE(w->Commit().ok());
  auto read = ReadTokenFile(path, 4);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, (std::vector<uint16_t>{1, 2, 3, 1, 2, 3}));
  EXPECT_EQ(CountEntries(), 1);
}

TEST_F(TokenFileTest, WriterRejectsCountsOutsideTheFormat) {
  EXPECT_EQ(TokenFileWriter::Create(dir_ + "/x", 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TokenFileWriter::Create(dir_ + "/x", kMaxTokensPerFile + 1)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteTokenFile(dir_ + "/x", {}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CountEntries(), 0);
}

}  // namespace
}  // namespace zeroshard::io
