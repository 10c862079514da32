// Every kind of bad model file, token file and loader input gets a clear
// error: the expected status code and a message naming the file and the
// problem. Never a crash, never a silent wrong result.
#include <sys/stat.h>

#include <cstdio>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/gpt2/config.h"
#include "worker/io/data_loader.h"
#include "worker/io/io_testing.h"
#include "worker/io/model_file.h"
#include "worker/io/token_file.h"

namespace zeroshard::io {
namespace {

using absl::StatusCode;
using testing::HeaderBytes;

constexpr int32_t kInt32Max = std::numeric_limits<int32_t>::max();

// maxT=4 V=10 Vp=12 L=2 NH=2 C=4.
std::vector<int32_t> ModelHeader(int32_t version = 3) {
  return {kModelMagic, version, 4, 10, 2, 2, 4, 12};
}
uint64_t SmallParams() {
  auto layout = gpt2::ParamLayout::Create(gpt2::Config{4, 10, 12, 2, 2, 4});
  return layout->num_params();
}
std::string Zeros(uint64_t n) { return std::string(n, '\0'); }
std::string TokenHeader(int32_t count) {
  return HeaderBytes({kTokenMagic, 1, count});
}

absl::Status ReadModel(const std::string& path) {
  return ReadModelFile(path).status();
}
absl::Status ReadTokens(const std::string& path) {
  return ReadTokenFile(path, 256).status();
}
absl::Status OpenLoader(std::vector<std::string> files, int B = 2, int T = 4,
                        int rank = 0, int world = 1, int vocab = 256) {
  return DataLoader::Open(
             testing::LoaderOptions(std::move(files), B, T, rank, world, vocab))
      .status();
}

struct Case {
  std::string name;
  std::string contents;  // written to <dir>/<name>.bin unless `no_file`
  std::function<absl::Status(const std::string& path)> run;
  StatusCode code;
  std::vector<std::string> message;  // substrings; the path is checked too
  bool no_file = false;
};

std::vector<Case> Cases() {
  const uint64_t n = SmallParams();
  std::vector<Case> c;
  auto model = [&](std::string name, std::string contents, StatusCode code,
                   std::vector<std::string> msg) {
    c.push_back({name, contents, ReadModel, code, msg});
  };
  auto tokens = [&](std::string name, std::string contents, StatusCode code,
                    std::vector<std::string> msg) {
    c.push_back({name, contents, ReadTokens, code, msg});
  };
  // ---- model files
  c.push_back({"model_missing",
               "",
               ReadModel,
               StatusCode::kNotFound,
               {"No such file or directory"},
               true});
  model("model_empty", "", StatusCode::kDataLoss,
        {"truncated: 0 bytes, shorter than the 1024-byte header"});
  model("model_short_header", Zeros(100), StatusCode::kDataLoss,
        {"truncated: 100 bytes"});
  model("model_bad_magic", HeaderBytes({1234, 3, 4, 10, 2, 2, 4, 12}),
        StatusCode::kInvalidArgument,
        {"bad magic 1234 (expected 20240326)", "model file"});
  model("model_token_magic", TokenHeader(10) + Zeros(20),
        StatusCode::kInvalidArgument, {"bad magic 20240520"});
  model("model_bad_version", HeaderBytes({kModelMagic, 4, 4, 10, 2, 2, 4, 12}),
        StatusCode::kInvalidArgument, {"unsupported model file version 4"});
  model("model_heads_not_dividing",
        HeaderBytes({kModelMagic, 3, 4, 10, 2, 3, 4, 12}),
        StatusCode::kInvalidArgument,
        {"num_heads 3 does not divide channels 4"});
  model("model_negative_channels",
        HeaderBytes({kModelMagic, 3, 4, 10, 2, 2, -4, 12}),
        StatusCode::kInvalidArgument, {"channels must be positive, got -4"});
  model("model_zero_layers", HeaderBytes({kModelMagic, 3, 4, 10, 0, 2, 4, 12}),
        StatusCode::kInvalidArgument, {"num_layers must be positive, got 0"});
  model("model_no_padded_vocab", HeaderBytes({kModelMagic, 3, 4, 10, 2, 2, 4}),
        StatusCode::kInvalidArgument, {"padded_vocab_size must be positive"});
  model("model_padded_below_vocab",
        HeaderBytes({kModelMagic, 3, 4, 10, 2, 2, 4, 8}),
        StatusCode::kInvalidArgument,
        {"padded_vocab_size 8 is smaller than vocab_size 10"});
  model("model_huge_fields_overflow",
        HeaderBytes({kModelMagic, 3, kInt32Max, kInt32Max, kInt32Max, 1,
                     kInt32Max, kInt32Max}),
        StatusCode::kInvalidArgument, {"too many parameters"});
  // Valid but enormous header (2^34 parameters) on a tiny file: caught by
  // the length check before anything is allocated.
  model("model_huge_but_valid_header",
        HeaderBytes({kModelMagic, 3, 1024, 1 << 28, 1, 1, 64, 1 << 28}),
        StatusCode::kDataLoss, {"truncated: 1024 bytes", "needs"});
  model("model_params_truncated", HeaderBytes(ModelHeader()) + Zeros(4 * n - 4),
        StatusCode::kDataLoss,
        {"truncated", "header (version 3, maxT=4 V=10 Vp=12 L=2 NH=2 C=4"});
  model("model_trailing_bytes", HeaderBytes(ModelHeader()) + Zeros(4 * n + 1),
        StatusCode::kDataLoss, {"1 unexpected trailing bytes"});
  model("model_bf16_with_fp32_payload",
        HeaderBytes(ModelHeader(5)) + Zeros(4 * n), StatusCode::kDataLoss,
        {"trailing bytes", "version 5"});
  model("model_fp32_with_bf16_payload",
        HeaderBytes(ModelHeader(3)) + Zeros(2 * n), StatusCode::kDataLoss,
        {"truncated"});
  c.push_back({"model_other_config",
               HeaderBytes(ModelHeader()) + Zeros(4 * n),
               [](const std::string& path) {
                 auto layout = gpt2::ParamLayout::Create(
                     gpt2::Config{4, 10, 12, 1, 2, 4});
                 std::vector<float> p(layout->num_params());
                 return ReadModelParams(path, *layout, p.data());
               },
               StatusCode::kInvalidArgument,
               {"model config maxT=4 V=10 Vp=12 L=2 NH=2 C=4 differs from the "
                "expected maxT=4 V=10 Vp=12 L=1"}});
  c.push_back({"model_is_directory",
               "",
               [](const std::string& path) {
                 mkdir(path.c_str(), 0755);
                 return ReadModel(path);
               },
               StatusCode::kInvalidArgument,
               {"is a directory"},
               true});
  // ---- token files
  c.push_back({"tokens_missing",
               "",
               ReadTokens,
               StatusCode::kNotFound,
               {"No such file or directory"},
               true});
  tokens("tokens_short_header", Zeros(1000), StatusCode::kDataLoss,
         {"truncated: 1000 bytes, shorter than the 1024-byte header"});
  tokens("tokens_model_magic", HeaderBytes(ModelHeader()) + Zeros(4 * n),
         StatusCode::kInvalidArgument,
         {"bad magic 20240326 (expected 20240520)"});
  tokens("tokens_bad_version", HeaderBytes({kTokenMagic, 2, 10}) + Zeros(20),
         StatusCode::kInvalidArgument, {"unsupported token file version 2"});
  tokens("tokens_count_zero", TokenHeader(0), StatusCode::kInvalidArgument,
         {"header token count is 0"});
  tokens("tokens_count_negative", TokenHeader(-5) + Zeros(10),
         StatusCode::kInvalidArgument, {"header token count is -5"});
  tokens("tokens_count_huge", TokenHeader(kInt32Max) + Zeros(20),
         StatusCode::kDataLoss,
         {"truncated: 1044 bytes, but the header (2147483647 tokens) needs "
          "4294968318"});
  tokens("tokens_too_short", TokenHeader(10) + Zeros(19), StatusCode::kDataLoss,
         {"truncated: 1043 bytes", "(10 tokens) needs 1044"});
  tokens("tokens_too_long", TokenHeader(10) + Zeros(22), StatusCode::kDataLoss,
         {"2 unexpected trailing bytes"});
  {
    std::vector<uint16_t> t(10, 1);
    t[7] = 300;
    tokens("tokens_id_too_big", TokenHeader(10) + testing::AsBytes(t),
           StatusCode::kInvalidArgument,
           {"token 300 at index 7 is not below vocab_size 256"});
  }
  // ---- data loader (B=2, T=4: a step needs 9 tokens)
  {
    std::vector<uint16_t> t(100, 3);
    t[42] = 256;
    c.push_back({"loader_id_too_big",
                 TokenHeader(100) + testing::AsBytes(t),
                 [](const std::string& path) { return OpenLoader({path}); },
                 StatusCode::kInvalidArgument,
                 {"token 256 at index 42 is not below vocab_size 256"}});
  }
  c.push_back({"loader_shard_of_bt_tokens",
               TokenHeader(8) + testing::AsBytes(std::vector<uint16_t>(8, 1)),
               [](const std::string& path) { return OpenLoader({path}); },
               StatusCode::kInvalidArgument,
               {"8 tokens, fewer than the world_size*batch_size*seq_len + 1 = "
                "9 one step needs"}});
  c.push_back(
      {"loader_shard_short_for_world",
       TokenHeader(20) + testing::AsBytes(std::vector<uint16_t>(20, 1)),
       [](const std::string& path) { return OpenLoader({path}, 2, 4, 1, 3); },
       StatusCode::kInvalidArgument,
       {"fewer than", "= 25", "W=3"}});
  c.push_back({"loader_missing_file",
               "",
               [](const std::string& path) { return OpenLoader({path}); },
               StatusCode::kNotFound,
               {"No such file or directory"},
               true});
  c.push_back(
      {"loader_glob_no_match",
       "",
       [](const std::string& path) { return OpenLoader({path + "_*.bin"}); },
       StatusCode::kNotFound,
       {"no file matches"},
       true});
  c.push_back({"loader_corrupt_shard",
               TokenHeader(100) + Zeros(150),
               [](const std::string& path) { return OpenLoader({path}); },
               StatusCode::kDataLoss,
               {"truncated"}});
  return c;
}

TEST(IoBadInputTest, EveryCaseGetsItsCodeAndAClearMessage) {
  const std::string dir = testing::MakeTempDir("io_bad_input");
  ASSERT_FALSE(dir.empty());
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    const std::string path = dir + "/" + c.name + ".bin";
    if (!c.no_file) {
      ASSERT_TRUE(testing::WriteBytes(path, c.contents));
    }
    const absl::Status s = c.run(path);
    std::printf("%-30s %s\n", c.name.c_str(), s.ToString().c_str());
    EXPECT_EQ(s.code(), c.code) << s;
    EXPECT_NE(s.message().find(path), std::string::npos)
        << "message does not name the file: " << s;
    for (const std::string& m : c.message) {
      EXPECT_NE(s.message().find(m), std::string::npos)
          << "missing '" << m << "' in: " << s;
    }
  }
}

TEST(IoBadInputTest, LoaderOptionsAreChecked) {
  const std::string dir = testing::MakeTempDir("io_bad_options");
  const std::string path = dir + "/t.bin";
  ASSERT_TRUE(WriteTokenFile(path, std::vector<uint16_t>(100, 1)).ok());
  const struct {
    absl::Status status;
    const char* message;
  } cases[] = {
      {OpenLoader({path}, 0), "batch_size must be positive, got 0"},
      {OpenLoader({path}, 2, -1), "seq_len must be positive, got -1"},
      {OpenLoader({path}, 2, 4, 0, 0), "world_size must be positive"},
      {OpenLoader({path}, 2, 4, 3, 3), "rank 3 is not in [0, 3)"},
      {OpenLoader({path}, 2, 4, -1, 3), "rank -1 is not in [0, 3)"},
      {OpenLoader({path}, 2, 4, 0, 1, 0), "vocab_size must be positive"},
      {OpenLoader({}), "no token files given"},
      {OpenLoader({path}, 1 << 20, 1 << 20, 0, 1 << 20),
       "is more than a token file can hold"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(c.status.code(), StatusCode::kInvalidArgument) << c.status;
    EXPECT_NE(c.status.message().find(c.message), std::string::npos)
        << c.status;
  }
}

TEST(IoBadInputTest, SeekRejectsPositionsOutsideTheData) {
  const std::string dir = testing::MakeTempDir("io_bad_seek");
  const std::string path = dir + "/t.bin";
  ASSERT_TRUE(WriteTokenFile(path, std::vector<uint16_t>(100, 1)).ok());
  auto loader =
      DataLoader::Open(testing::LoaderOptions({path}, 2, 4, 0, 1, 256));
  ASSERT_TRUE(loader.ok()) << loader.status();
  EXPECT_TRUE(loader->Seek({5, 0, 91}).ok());  // 91 + 9 = 100: fits
  const absl::Status beyond = loader->Seek({0, 0, 92});
  EXPECT_EQ(beyond.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(beyond.message().find("leaves less than a step"), std::string::npos)
      << beyond;
  EXPECT_EQ(loader->Seek({0, 1, 0}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(loader->Seek({-1, 0, 0}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(loader->position(), (LoaderPosition{5, 0, 91}));  // unchanged
}

TEST(IoBadInputTest, ConfigWhoseHeadsDoNotDivideChannelsCannotBeWritten) {
  auto layout = gpt2::ParamLayout::Create(gpt2::Config{4, 10, 12, 2, 3, 4});
  EXPECT_EQ(layout.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(layout.status().message().find("does not divide"),
            std::string::npos);
}

}  // namespace
}  // namespace zeroshard::io
