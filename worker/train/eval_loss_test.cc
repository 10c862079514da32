// The eval set (held-out batches spread over --val_data's file, or the
// first training batch), its errors, the eval period, and the records.
#include "worker/train/eval_loss.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/gpt2/config.h"
#include "worker/io/token_file.h"
#include "worker/train/run_metrics.h"

namespace zeroshard::train {
namespace {

std::string TempPath(const std::string& name) {
  const char* d = std::getenv("TEST_TMPDIR");
  return std::string(d != nullptr ? d : "/tmp") + "/" + name;
}

// Tokens 0, 1, 2, ... (mod 256) in a file of `n`.
std::string Tokens(const std::string& name, int n) {
  std::vector<uint16_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = static_cast<uint16_t>(i % 256);
  const std::string path = TempPath(name);
  EXPECT_TRUE(io::WriteTokenFile(path, t).ok());
  return path;
}

TrainSpec Spec(const std::string& data) {
  TrainSpec s;
  s.config = {8, 256, 256, 1, 2, 16};  // maxT V Vp L H C
  s.zero.micro_batch = 2;
  s.zero.seq_len = 8;
  if (!data.empty()) s.data = {data};
  return s;
}

TEST(EvalLossTest, Period) {
  EXPECT_EQ(EvalPeriod(0, 1000), 50);  // about 20 per run
  EXPECT_EQ(EvalPeriod(0, 6), 1);
  EXPECT_EQ(EvalPeriod(-1, 7), 7);  // the end only
  EXPECT_EQ(EvalPeriod(5, 7), 5);
  EXPECT_TRUE(IsEvalStep(5, 7, 5));
  EXPECT_FALSE(IsEvalStep(6, 7, 5));
  EXPECT_TRUE(IsEvalStep(7, 7, 5));  // the last
}

TEST(EvalLossTest, HeldOutBatchesAreSpreadOverTheFile) {
  const std::string val = Tokens("val.bin", 1000);
  auto set = OpenEvalSet(Spec(Tokens("train.bin", 100)), val);
  ASSERT_TRUE(set.ok()) << set.status();
  ASSERT_TRUE(set->has_value());
  const EvalSet& e = **set;
  EXPECT_TRUE(e.held_out);
  ASSERT_EQ(e.inputs.size(), kMaxEvalBatches);
  EXPECT_EQ(e.tokens(), kMaxEvalBatches * 16);
  const int stride = 999 / kMaxEvalBatches;
  for (int i = 0; i < kMaxEvalBatches; ++i) {
    ASSERT_EQ(e.inputs[i].size(), 16u);
    EXPECT_EQ(e.inputs[i][0], (i * stride) % 256) << i;
    EXPECT_EQ(e.targets[i][15], (i * stride + 16) % 256) << i;
  }
  // A short file: fewer batches.
  auto small = OpenEvalSet(Spec(""), Tokens("val_small.bin", 40));
  ASSERT_TRUE(small.ok() && small->has_value());
  EXPECT_EQ((*small)->inputs.size(), 2u);  // (40 - 1) / 16
}

TEST(EvalLossTest, WithoutValDataTheFirstTrainingBatch) {
  auto set = OpenEvalSet(Spec(Tokens("train2.bin", 100)), "");
  ASSERT_TRUE(set.ok() && set->has_value());
  EXPECT_FALSE((*set)->held_out);
  ASSERT_EQ((*set)->inputs.size(), 1u);
  EXPECT_EQ((*set)->inputs[0][0], 0);
  auto none = OpenEvalSet(Spec(""), "");  // synthetic tokens
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  auto short_train = OpenEvalSet(Spec(Tokens("train3.bin", 16)), "");
  ASSERT_TRUE(short_train.ok());
  EXPECT_FALSE(short_train->has_value());
}

TEST(EvalLossTest, BadValDataNamesTheFlag) {
  auto missing = OpenEvalSet(Spec(""), TempPath("no_such_*.bin"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("--val_data"), std::string::npos)
      << missing.status();
  auto absent = OpenEvalSet(Spec(""), TempPath("absent.bin"));
  ASSERT_FALSE(absent.ok());
  EXPECT_NE(absent.status().message().find("--val_data"), std::string::npos)
      << absent.status();
  auto tiny = OpenEvalSet(Spec(""), Tokens("val_tiny.bin", 16));
  ASSERT_FALSE(tiny.ok());
  EXPECT_NE(tiny.status().message().find("fewer than one eval batch"),
            std::string::npos)
      << tiny.status();
}

TEST(EvalLossTest, LossIsTheMeanOverBatches) {
  const TrainSpec spec = Spec("");
  auto layout = gpt2::ParamLayout::Create(spec.config);
  ASSERT_TRUE(layout.ok());
  const std::vector<float> params = SeededGpt2Init(*layout, 3, 0.02);
  auto set = OpenEvalSet(spec, Tokens("val_mean.bin", 1000));
  ASSERT_TRUE(set.ok() && set->has_value());
  auto all = EvalLoss(spec, **set, params);
  ASSERT_TRUE(all.ok()) << all.status();
  double sum = 0;
  for (size_t i = 0; i < (*set)->inputs.size(); ++i) {
    EvalSet one = **set;
    one.inputs = {(*set)->inputs[i]};
    one.targets = {(*set)->targets[i]};
    auto r = EvalLoss(spec, one, params);
    ASSERT_TRUE(r.ok()) << r.status();
    sum += r->loss;
  }
  EXPECT_NEAR(all->loss, sum / (*set)->inputs.size(), 1e-6);
  // On the training's device: the host-emulated one gives the CPU's loss,
  // bit for bit; an unknown device is refused by name.
  TrainSpec on = spec;
  on.device = "host-emulated";
  auto dev = EvalLoss(on, **set, params);
  ASSERT_TRUE(dev.ok()) << dev.status();
  EXPECT_EQ(dev->loss, all->loss);
  on.device = "abacus";
  EXPECT_NE(EvalLoss(on, **set, params).status().message().find("abacus"),
            std::string::npos);
  EXPECT_GT(all->loss, 5.0);  // near ln 256 = 5.55 at init
  EXPECT_TRUE(all->held_out);
  const std::string record = EvalRecord(40, *all);
  EXPECT_EQ(JsonEvent(record), "eval");
  EXPECT_EQ(JsonNumber(record, "step"), 40);
  EXPECT_EQ(JsonNumber(record, "held_out"), 1);
  EXPECT_NEAR(*JsonNumber(record, "loss"), all->loss, 1e-5);
}

}  // namespace
}  // namespace zeroshard::train
