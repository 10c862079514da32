// Interoperability with an independent implementation of llm.c's formats
// (llmc_files.py, numpy): a model or token file written by zeroshard loads
// in the script, and one written by the script loads in zeroshard, bit for
// bit. Each side also writes the flat buffer ("raw", zeroshard's memory
// order) it expects the other to read.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/dtype.h"
#include "gtest/gtest.h"
#include "worker/gpt2/config.h"
#include "worker/io/io_testing.h"
#include "worker/io/model_file.h"
#include "worker/io/token_file.h"

namespace zeroshard::io {
namespace {

using gpt2::Config;

// Two configs: one layer, and three layers (where llm.c's grouping by kind
// differs from the block-contiguous memory order); plus an odd-sized one.
std::vector<Config> Configs() {
  return {Config{8, 50, 64, 1, 1, 8}, Config{16, 100, 128, 3, 4, 16},
          Config{5, 37, 37, 2, 3, 6}};
}

std::string ConfigArg(const Config& c) {
  return absl::StrJoin({c.max_seq_len, c.vocab_size, c.padded_vocab_size,
                        c.num_layers, c.num_heads, c.channels},
                       ",");
}

class InteropTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string out;
    ASSERT_EQ(
        testing::RunCommand({testing::kPython, "-c", "import numpy"}, &out), 0)
        << testing::kPython
        << " with numpy is needed (Debian: python3-numpy):\n"
        << out;
    dir_ = testing::MakeTempDir("llmc_interop");
    ASSERT_FALSE(dir_.empty());
    script_ = testing::RunfilePath("worker/io/llmc_files.py");
  }
  // Runs the script with space-separated `args` (no spaces inside one);
  // returns its exit code and prints its output.
  int Script(const std::string& args, std::string* out) {
    std::vector<std::string> argv = {testing::kPython, script_};
    for (absl::string_view a : absl::StrSplit(args, ' ', absl::SkipEmpty())) {
      argv.emplace_back(a);
    }
    const int rc = testing::RunCommand(argv, out);
    std::printf("llmc_files.py %s\n%s", args.c_str(), out->c_str());
    return rc;
  }
  std::string dir_, script_;
};

TEST_F(InteropTest, ModelWrittenByZeroshardLoadsInScript) {
  for (const Config& c : Configs()) {
    SCOPED_TRACE(gpt2::DescribeConfig(c));
    auto layout = gpt2::ParamLayout::Create(c);
    ASSERT_TRUE(layout.ok()) << layout.status();
    const std::vector<float> params =
        testing::RandomParams(layout->num_params(), c.num_layers);
    const std::string base = dir_ + "/cpp_L" + std::to_string(c.num_layers);
    ASSERT_TRUE(testing::WriteBytes(base + ".raw", testing::AsBytes(params)));
    ASSERT_TRUE(WriteModelFile(base + "_v3.bin", *layout, params.data()).ok());
    ASSERT_TRUE(WriteModelFile(base + "_v5.bin", *layout, params.data(),
                               ModelDtype::kBf16)
                    .ok());
    std::string out;
    EXPECT_EQ(Script(absl::StrCat("check-model ", base, "_v3.bin ", base,
                                  ".raw --config ", ConfigArg(c)),
                     &out),
              0)
        << out;
    // The script rounds the raw fp32 to bf16 itself (nearest even) and
    // compares with what it widens from our version-5 file.
    EXPECT_EQ(Script(absl::StrCat("check-model ", base, "_v5.bin ", base,
                                  ".raw --round-bf16 --config ", ConfigArg(c)),
                     &out),
              0)
        << out;
  }
}

TEST_F(InteropTest, ModelWrittenByScriptLoadsInZeroshard) {
  for (const Config& c : Configs()) {
    for (int version : {3, 5}) {
      SCOPED_TRACE(absl::StrCat(gpt2::DescribeConfig(c), " v", version));
      const std::string base =
          absl::StrCat(dir_, "/py_L", c.num_layers, "_v", version);
      std::string out;
      ASSERT_EQ(
          Script(absl::StrCat("write-model ", base, ".bin ", base,
                              ".raw --config ", ConfigArg(c), " --version ",
                              version, " --seed ", c.num_layers * 10 + version),
                 &out),
          0)
          << out;
      auto model = ReadModelFile(base + ".bin");
      ASSERT_TRUE(model.ok()) << model.status();
      EXPECT_TRUE(model->config == c) << gpt2::DescribeConfig(model->config);
      EXPECT_EQ(model->version, version);
      // For version 5 the raw file holds the bf16 bits widened (<< 16):
      // every bf16 pattern, NaNs included, must widen exactly.
      const std::string raw = testing::ReadBytes(base + ".raw");
      ASSERT_EQ(raw.size(), model->params.size() * sizeof(float));
      size_t mismatches = 0;
      for (size_t i = 0; i < model->params.size(); ++i) {
        uint32_t got, want;
        std::memcpy(&got, &model->params[i], 4);
        std::memcpy(&want, raw.data() + 4 * i, 4);
        if (got != want && ++mismatches <= 5) {
          ADD_FAILURE() << "param " << i << ": got 0x" << std::hex << got
                        << ", script wrote 0x" << want;
        }
      }
      EXPECT_EQ(mismatches, 0u);
    }
  }
}

TEST_F(InteropTest, TokensWrittenByZeroshardLoadInScript) {
  std::mt19937_64 rng(5);
  std::vector<uint16_t> tokens(4099);
  for (uint16_t& t : tokens) t = static_cast<uint16_t>(rng());
  const std::string base = dir_ + "/cpp_tokens";
  ASSERT_TRUE(WriteTokenFile(base + ".bin", tokens).ok());
  ASSERT_TRUE(testing::WriteBytes(base + ".raw", testing::AsBytes(tokens)));
  std::string out;
  EXPECT_EQ(
      Script(absl::StrCat("check-tokens ", base, ".bin ", base, ".raw"), &out),
      0)
      << out;
}

TEST_F(InteropTest, TokensWrittenByScriptLoadInZeroshard) {
  const std::string base = dir_ + "/py_tokens";
  std::string out;
  ASSERT_EQ(Script(absl::StrCat("write-tokens ", base, ".bin ", base,
                                ".raw --count 5003 --vocab 50257 --seed 9"),
                   &out),
            0)
      << out;
  auto tokens = ReadTokenFile(base + ".bin", 50257);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ(testing::AsBytes(*tokens), testing::ReadBytes(base + ".raw"));
}

// The script's own checks must be able to fail: a flipped bit is reported.
TEST_F(InteropTest, ScriptReportsAMismatch) {
  const Config c = Configs()[1];
  auto layout = gpt2::ParamLayout::Create(c);
  ASSERT_TRUE(layout.ok());
  std::vector<float> params = testing::RandomParams(layout->num_params(), 1);
  const std::string base = dir_ + "/flip";
  ASSERT_TRUE(WriteModelFile(base + ".bin", *layout, params.data()).ok());
  const gpt2::ParamTensor& t = layout->Get(gpt2::ParamKind::kFcw, 2);
  uint32_t bits;
  std::memcpy(&bits, &params[t.offset + 5], 4);
  bits ^= 1;
  std::memcpy(&params[t.offset + 5], &bits, 4);
  ASSERT_TRUE(testing::WriteBytes(base + ".raw", testing::AsBytes(params)));
  std::string out;
  EXPECT_NE(
      Script(absl::StrCat("check-model ", base, ".bin ", base, ".raw"), &out),
      0);
  EXPECT_NE(out.find("MISMATCH at 1 of"), std::string::npos) << out;
  EXPECT_NE(out.find("h.2.fcw[5]"), std::string::npos) << out;
}

}  // namespace
}  // namespace zeroshard::io
