#include "worker/gpt2/config.h"

#include "gtest/gtest.h"

namespace zeroshard::gpt2 {
namespace {

Config Small() {
  Config c;
  c.max_seq_len = 16;
  c.vocab_size = 50;
  c.padded_vocab_size = 64;
  c.num_layers = 3;
  c.num_heads = 2;
  c.channels = 12;
  return c;
}

TEST(ConfigTest, RejectsBadFieldsNamingThem) {
  Config c = Small();
  c.num_heads = 5;
  absl::Status s = ValidateConfig(c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("num_heads 5 does not divide channels 12"),
            std::string::npos)
      << s;
  c = Small();
  c.padded_vocab_size = 49;
  EXPECT_NE(ValidateConfig(c).message().find("padded_vocab_size"),
            std::string::npos);
  c = Small();
  c.num_layers = 0;
  EXPECT_NE(ValidateConfig(c).message().find("num_layers must be positive"),
            std::string::npos);
  c = Small();
  c.channels = 1 << 30;
  c.padded_vocab_size = 1 << 30;
  c.num_heads = 1;
  EXPECT_FALSE(ValidateConfig(c).ok());
  EXPECT_FALSE(ParamLayout::Create(c).ok());
}

TEST(ConfigTest, LayoutIsContiguousPerBlockAndMatchesGpt2Count) {
  const Config c = Small();
  absl::StatusOr<ParamLayout> layout = ParamLayout::Create(c);
  ASSERT_TRUE(layout.ok()) << layout.status();
  const uint64_t C = 12, L = 3;
  EXPECT_EQ(layout->num_params(),
            64 * C + 16 * C + L * (12 * C * C + 13 * C) + 2 * C);
  uint64_t expect_offset = 0;
  for (const ParamTensor& t : layout->tensors()) {
    EXPECT_EQ(t.offset, expect_offset) << t.name;
    expect_offset += t.numel;
  }
  EXPECT_EQ(expect_offset, layout->num_params());
  for (int l = 0; l < 3; ++l) {
    Range r = layout->LayerRange(l);
    EXPECT_EQ(r.size(), 12 * C * C + 13 * C);
    EXPECT_EQ(layout->Get(ParamKind::kQkvw, l).name,
              "h." + std::to_string(l) + ".qkvw");
    EXPECT_TRUE(r.Contains({layout->Get(ParamKind::kFcprojw, l).offset,
                            layout->Get(ParamKind::kFcprojw, l).offset + 1}));
  }
  EXPECT_EQ(layout->Get(ParamKind::kFcprojw, 1).shape,
            (std::vector<int64_t>{12, 48}));
  EXPECT_EQ(layout->Get(ParamKind::kWte).shape, (std::vector<int64_t>{64, 12}));
  EXPECT_EQ(layout->EmbeddingRange().end, layout->LayerRange(0).begin);
  EXPECT_EQ(layout->LayerRange(2).end, layout->FinalNormRange().begin);
}

TEST(ConfigTest, FileOrderGroupsKindsAcrossLayers) {
  absl::StatusOr<ParamLayout> layout = ParamLayout::Create(Small());
  ASSERT_TRUE(layout.ok());
  std::vector<const ParamTensor*> order = layout->FileOrder();
  ASSERT_EQ(order.size(), layout->tensors().size());
  std::vector<std::string> names;
  for (const ParamTensor* t : order) names.push_back(t->name);
  EXPECT_EQ(names[0], "wte");
  EXPECT_EQ(names[1], "wpe");
  EXPECT_EQ(names[2], "h.0.ln1w");
  EXPECT_EQ(names[3], "h.1.ln1w");
  EXPECT_EQ(names[4], "h.2.ln1w");
  EXPECT_EQ(names[5], "h.0.ln1b");
  EXPECT_EQ(names[names.size() - 3], "h.2.fcprojb");
  EXPECT_EQ(names.back(), "lnfb");
}

TEST(ConfigTest, TensorDescsPutDecayOnMatricesOnly) {
  absl::StatusOr<ParamLayout> layout = ParamLayout::Create(Small());
  ASSERT_TRUE(layout.ok());
  for (const TensorDesc& d : layout->TensorDescs()) {
    EXPECT_EQ(d.param_group, d.shape.size() == 2 ? 0u : 1u) << d.name;
  }
}

}  // namespace
}  // namespace zeroshard::gpt2
