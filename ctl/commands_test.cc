// zeroshard-ctl's pure parts: the GPT-2 config behind a registered spec,
// layout comparison, and the newest checkpoint common to every server.
#include <string>
#include <vector>

#include "ctl/checkpoint_commands.h"
#include "ctl/model_commands.h"
#include "gtest/gtest.h"
#include "worker/gpt2/config.h"

namespace zeroshard::ctl {
namespace {

// maxT=16 V=Vp=64 L=2 NH=4 C=32
gpt2::Config Tiny() { return gpt2::Config{16, 64, 64, 2, 4, 32}; }

// The spec a job registers for `config` (names and shapes, memory order).
v1::ModelSpec SpecOf(const gpt2::Config& config) {
  v1::ModelSpec spec;
  spec.set_job_id("j");
  for (const TensorDesc& t :
       gpt2::ParamLayout::Create(config).value().TensorDescs()) {
    v1::TensorSpec* ts = spec.add_tensors();
    ts->set_name(t.name);
    for (int64_t d : t.shape) ts->add_shape(d);
  }
  return spec;
}

TEST(ConfigFromSpec, DerivesEveryFieldButHeadsAndVocab) {
  auto c = ConfigFromSpec(SpecOf(Tiny()), 4, 0);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(*c, Tiny());
  gpt2::Config padded = Tiny();
  padded.vocab_size = 50;
  c = ConfigFromSpec(SpecOf(padded), 4, 50);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(*c, padded);
}

TEST(ConfigFromSpec, RejectsHeadsThatDoNotDivideChannels) {
  auto c = ConfigFromSpec(SpecOf(Tiny()), 5, 0);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message(),
            "--heads 5 does not divide the model's 32 channels");
  c = ConfigFromSpec(SpecOf(Tiny()), 4, 65);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ConfigFromSpec, RejectsOtherModels) {
  v1::ModelSpec flat;
  flat.add_tensors()->set_name("w");
  flat.mutable_tensors(0)->add_shape(4096);
  auto c = ConfigFromSpec(flat, 1, 0);
  EXPECT_EQ(c.status().message(),
            "the registered model is not a GPT-2 layout: 1 tensors, not 4 + "
            "12 per block");
  v1::ModelSpec renamed = SpecOf(Tiny());
  renamed.mutable_tensors(5)->set_name("h.0.qkv");
  c = ConfigFromSpec(renamed, 4, 0);
  EXPECT_EQ(c.status().message(),
            "the registered model is not a GPT-2 layout: tensor 5: registered "
            "'h.0.qkv' 96, GPT-2 'h.0.qkvb' 96");
}

TEST(DescribeLayoutDifference, NamesTheFirstDifferingTensor) {
  const v1::ModelSpec spec = SpecOf(Tiny());
  auto same = gpt2::ParamLayout::Create(Tiny());
  EXPECT_EQ(DescribeLayoutDifference(spec, *same, "file"), "");
  gpt2::Config wide = Tiny();
  wide.channels = 64;
  EXPECT_EQ(
      DescribeLayoutDifference(spec, *gpt2::ParamLayout::Create(wide), "file"),
      "tensor 0: registered 'wte' 64x32, file 'wte' 64x64");
  gpt2::Config deeper = Tiny();
  deeper.num_layers = 3;
  EXPECT_EQ(DescribeLayoutDifference(spec, *gpt2::ParamLayout::Create(deeper),
                                     "file"),
            "tensor 26: registered 'lnfw' 32, file 'h.2.ln1w' 32");
}

TEST(NewestCommonCheckpoint, IsTheNewestStepOnEveryServer) {
  std::vector<v1::GetStatsResponse> stats(2);
  EXPECT_EQ(NewestCommonCheckpoint(stats), std::nullopt);
  for (uint64_t s : {9, 6, 3}) stats[0].add_checkpoint_steps(s);
  for (uint64_t s : {6, 3}) stats[1].add_checkpoint_steps(s);
  EXPECT_EQ(NewestCommonCheckpoint(stats), 6u);
  stats[1].clear_checkpoint_steps();
  EXPECT_EQ(NewestCommonCheckpoint(stats), std::nullopt);
  EXPECT_EQ(NewestCommonCheckpoint({}), std::nullopt);
  // Step 0 is a checkpoint like any other (a job shorter than its interval).
  stats[0].clear_checkpoint_steps();
  stats[0].add_checkpoint_steps(0);
  stats[1].add_checkpoint_steps(0);
  EXPECT_EQ(NewestCommonCheckpoint(stats), 0u);
}

}  // namespace
}  // namespace zeroshard::ctl
