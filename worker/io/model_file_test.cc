#include "worker/io/model_file.h"

#include <dirent.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/env/fault_env.h"
#include "common/env/mem_env.h"
#include "gtest/gtest.h"
#include "worker/gpt2/config.h"
#include "worker/io/io_testing.h"

namespace zeroshard::io {
namespace {

using gpt2::Config;
using gpt2::ParamKind;
using gpt2::ParamLayout;

Config SmallConfig(int layers) {
  Config c;
  c.max_seq_len = 8;
  c.vocab_size = 50;
  c.padded_vocab_size = 64;
  c.num_layers = layers;
  c.num_heads = 2;
  c.channels = 8;
  return c;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<std::string> DirEntries(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  while (dirent* e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..")) {
      out.push_back(e->d_name);
    }
  }
  closedir(d);
  return out;
}

class ModelFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("model_file_test");
    ASSERT_FALSE(dir_.empty());
  }
  std::string dir_;
};

TEST_F(ModelFileTest, Fp32RoundTripIsBitExact) {
  for (int layers : {1, 3}) {
    auto layout = ParamLayout::Create(SmallConfig(layers));
    ASSERT_TRUE(layout.ok()) << layout.status();
    const std::vector<float> params =
        testing::RandomParams(layout->num_params(), 7);
    const std::string path = dir_ + "/m" + std::to_string(layers) + ".bin";
    ASSERT_TRUE(WriteModelFile(path, *layout, params.data()).ok());
    EXPECT_EQ(testing::ReadBytes(path).size(),
              kHeaderBytes + 4 * layout->num_params());

    auto info = ReadModelFileInfo(path);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->version, 3);
    EXPECT_EQ(info->dtype, ModelDtype::kFp32);
    EXPECT_TRUE(info->config == layout->config());

    auto model = ReadModelFile(path);
    ASSERT_TRUE(model.ok()) << model.status();
    EXPECT_EQ(model->version, 3);
    EXPECT_TRUE(model->config == layout->config());
    EXPECT_TRUE(SameBits(model->params, params));

    std::vector<float> into(layout->num_params());
    ASSERT_TRUE(ReadModelParams(path, *layout, into.data()).ok());
    EXPECT_TRUE(SameBits(into, params));
  }
}

// The file groups each kind across layers: after wte and wpe come ln1w of
// layer 0, ln1w of layer 1, then ln1b of layer 0, ...
TEST_F(ModelFileTest, FileHoldsTensorsInLlmcOrder) {
  auto layout = ParamLayout::Create(SmallConfig(2));
  ASSERT_TRUE(layout.ok());
  std::vector<float> params(layout->num_params());
  for (const gpt2::ParamTensor& t : layout->tensors()) {
    const float tag = static_cast<float>(static_cast<int>(t.kind) * 100 +
                                         std::max(t.layer, 0));
    for (uint64_t i = 0; i < t.numel; ++i) params[t.offset + i] = tag;
  }
  const std::string path = dir_ + "/order.bin";
  ASSERT_TRUE(WriteModelFile(path, *layout, params.data()).ok());
  const std::string bytes = testing::ReadBytes(path);
  std::vector<float> file((bytes.size() - kHeaderBytes) / 4);
  std::memcpy(file.data(), bytes.data() + kHeaderBytes, file.size() * 4);
  const int C = 8;
  uint64_t pos = 64 * C + 8 * C;         // after wte (Vp, C) and wpe (maxT, C)
  EXPECT_EQ(file[pos], 200.0f);          // h.0.ln1w
  EXPECT_EQ(file[pos + C], 201.0f);      // h.1.ln1w
  EXPECT_EQ(file[pos + 2 * C], 300.0f);  // h.0.ln1b
  EXPECT_EQ(file[pos + 4 * C], 400.0f);  // h.0.qkvw
  EXPECT_EQ(file[pos + 4 * C + 3 * C * C], 401.0f);  // h.1.qkvw
  EXPECT_EQ(file.back(), 1500.0f);                   // lnfb
  const int32_t* h = reinterpret_cast<const int32_t*>(bytes.data());
  EXPECT_EQ(h[0], kModelMagic);
  EXPECT_EQ(h[1], 3);
  EXPECT_EQ(h[2], 8);   // max_seq_len
  EXPECT_EQ(h[3], 50);  // vocab_size
  EXPECT_EQ(h[4], 2);   // num_layers
  EXPECT_EQ(h[5], 2);   // num_heads
  EXPECT_EQ(h[6], C);   // channels
  EXPECT_EQ(h[7], 64);  // padded_vocab_size
  EXPECT_EQ(h[8], 0);
}

TEST_F(ModelFileTest, Bf16WritesRoundedAndReadsWidenedExactly) {
  auto layout = ParamLayout::Create(SmallConfig(2));
  ASSERT_TRUE(layout.ok());
  const std::vector<float> params =
      testing::RandomParams(layout->num_params(), 11);
  const std::string path = dir_ + "/bf16.bin";
  ASSERT_TRUE(
      WriteModelFile(path, *layout, params.data(), ModelDtype::kBf16).ok());
  EXPECT_EQ(testing::ReadBytes(path).size(),
            kHeaderBytes + 2 * layout->num_params());
  auto model = ReadModelFile(path);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->version, 5);
  std::vector<float> expected(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    expected[i] = Bf16ToFp32(Fp32ToBf16(params[i]));
  }
  EXPECT_TRUE(SameBits(model->params, expected));
}

TEST_F(ModelFileTest, WriteReplacesAtomicallyAndLeavesNoTemporaryFile) {
  auto layout = ParamLayout::Create(SmallConfig(1));
  ASSERT_TRUE(layout.ok());
  const std::string path = dir_ + "/m.bin";
  ASSERT_TRUE(testing::WriteBytes(path, "old"));
  const std::vector<float> params =
      testing::RandomParams(layout->num_params(), 3);
  ASSERT_TRUE(WriteModelFile(path, *layout, params.data()).ok());
  EXPECT_EQ(DirEntries(dir_), std::vector<std::string>{"m.bin"});
  auto model = ReadModelFile(path);
  ASSERT_TRUE(model.ok());
  EXPECT_TRUE(SameBits(model->params, params));

  const absl::Status s =
      WriteModelFile(dir_ + "/no/such/dir/m.bin", *layout, params.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find(dir_ + "/no/such/dir/m.bin"), std::string::npos);
  EXPECT_EQ(DirEntries(dir_), std::vector<std::string>{"m.bin"});
}

// Through an Env other than the disk: a device that fills half-way through
// a write leaves the previous file whole and no temporary file; a failed
// read names the file.
TEST(ModelFileEnvTest, FullDeviceLeavesThePreviousFile) {
  MemEnv mem;
  FaultEnv env(&mem);
  ASSERT_TRUE(mem.CreateDir("/m").ok());
  const std::string path = "/m/gpt2.bin";
  auto layout = ParamLayout::Create(SmallConfig(2));
  ASSERT_TRUE(layout.ok());
  const uint64_t n = layout->num_params();
  const std::vector<float> old_params = testing::RandomParams(n, 1);
  const std::vector<float> new_params = testing::RandomParams(n, 2);
  ASSERT_TRUE(
      WriteModelFile(path, *layout, old_params.data(), ModelDtype::kFp32, &env)
          .ok());
  env.SetWriteBudget(kHeaderBytes + 2 * n);
  const absl::Status s =
      WriteModelFile(path, *layout, new_params.data(), ModelDtype::kFp32, &env);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find(path), std::string::npos) << s;
  EXPECT_EQ(*mem.ListDir("/m"), std::vector<std::string>{"gpt2.bin"});
  env.ClearFaults();
  auto model = ReadModelFile(path, &env);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_TRUE(SameBits(model->params, old_params));

  env.FailReads("gpt2.bin", 1);
  const absl::Status bad = ReadModelFile(path, &env).status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInternal) << bad;
  EXPECT_NE(bad.message().find(path), std::string::npos) << bad;
}

}  // namespace
}  // namespace zeroshard::io
