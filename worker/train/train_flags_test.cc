#include "worker/train/train_flags.h"

#include <string>
#include <vector>

#include "common/flags.h"
#include "gtest/gtest.h"

namespace zeroshard::train {
namespace {

// Parses `args` (flags only) with AddTrainFlags.
absl::StatusOr<TrainFlags> Parse(const std::vector<std::string>& args) {
  TrainFlags f;
  FlagSet flags("test", "test [flags]");
  AddTrainFlags(&flags, &f);
  std::vector<std::string> copy = {"test"};
  copy.insert(copy.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : copy) argv.push_back(a.data());
  auto rest = flags.Parse(static_cast<int>(argv.size()), argv.data());
  if (!rest.ok()) return rest.status();
  if (!rest->empty()) return absl::InvalidArgumentError("positional args");
  return f;
}

TEST(TrainFlagsTest, ParseToArgvParseGivesTheSameFlags) {
  const std::vector<std::vector<std::string>> cases = {
      {},
      {"--config=ds.json",
       "--data=a_*.bin,b.bin",
       "--layers=3",
       "--heads=2",
       "--channels=48",
       "--vocab=64",
       "--max-seq-len=32",
       "--seq_len=16",
       "--steps=7",
       "--seed=-3",
       "--threads=4",
       "--init_std=0.0123456789012345",
       "--save=out.bin",
       "--checkpoint_interval=0",
       "--job_id=",
       "--tls_ca=ca.pem",
       "--tls_cert=c.pem",
       "--tls_key=c.key",
       "--token_file=t",
       "--val_data=val_*.bin",
       "--eval_every=-1",
       "--device=host-emulated",
       "--activation_checkpointing"},
      {"--config", "ds.json", "--model_file", "init.bin", "--insecure",
       "--checkpoint-interval", "5", "--job-id=j1"},
  };
  for (const std::vector<std::string>& args : cases) {
    auto first = Parse(args);
    ASSERT_TRUE(first.ok()) << first.status();
    const std::vector<std::string> argv = TrainFlagsArgv(*first);
    auto second = Parse(argv);
    ASSERT_TRUE(second.ok()) << second.status();
    EXPECT_TRUE(*first == *second) << args.size() << " args";
    EXPECT_EQ(TrainFlagsArgv(*second), argv);
  }
}

TEST(TrainFlagsTest, DefaultsNeedNoArgv) {
  EXPECT_TRUE(TrainFlagsArgv(TrainFlags{}).empty());
  TrainFlags f;
  f.steps = 9;
  f.security.insecure = true;
  EXPECT_EQ(TrainFlagsArgv(f),
            (std::vector<std::string>{"--steps=9", "--insecure"}));
}

TEST(TrainFlagsTest, DefaultsAreValidWithAConfig) {
  TrainFlags f;
  EXPECT_NE(ValidateTrainFlags(f).message().find("--config"),
            absl::string_view::npos);
  f.config = "ds.json";
  EXPECT_TRUE(ValidateTrainFlags(f).ok()) << ValidateTrainFlags(f);
  auto model = ModelFromFlags(f);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->max_seq_len, 64);  // --max_seq_len 0: --seq_len
  EXPECT_EQ(model->num_layers, 2);
  EXPECT_EQ(model->vocab_size, 256);
}

// A value that does not parse, and one out of range: both name the flag.
TEST(TrainFlagsTest, BadValuesNameTheFlag) {
  struct Case {
    std::vector<std::string> args;
    std::string flag;
  };
  const std::vector<Case> cases = {
      {{"--steps=many"}, "--steps"},
      {{"--init_std=wide"}, "--init_std"},
      {{"--insecure=maybe"}, "--insecure"},
      {{"--steps=0"}, "--steps"},
      {{"--seq_len=-1"}, "--seq_len"},
      {{"--threads=0"}, "--threads"},
      {{"--init_std=-1"}, "--init_std"},
      {{"--checkpoint_interval=-2"}, "--checkpoint_interval"},
      {{"--layers=0"}, "--layers"},
      {{"--heads=3"}, "--heads"},  // does not divide 128 channels
      {{"--vocab=3000000000"}, "--vocab"},
      {{"--max_seq_len=8"}, "--max_seq_len"},  // below --seq_len 64
      {{"--job_id="}, "--job_id"},
      {{"--eval_every=-2"}, "--eval_every"},
      {{"--device=gpu"}, "--device 'gpu'"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = c.args;
    args.push_back("--config=ds.json");
    auto f = Parse(args);
    absl::Status s = f.ok() ? ValidateTrainFlags(*f) : f.status();
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << c.args[0] << ": " << s;
    EXPECT_NE(s.message().find(c.flag), absl::string_view::npos)
        << c.args[0] << ": " << s;
  }
}

TEST(TrainFlagsTest, AModelFileTakesThePlaceOfTheShape) {
  TrainFlags f;
  f.config = "ds.json";
  f.layers = 0;  // ignored with --model_file
  f.model_file = "/nonexistent/init.bin";
  EXPECT_TRUE(ValidateTrainFlags(f).ok());
  auto model = ModelFromFlags(f);
  EXPECT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("/nonexistent/init.bin"),
            absl::string_view::npos)
      << model.status();
}

}  // namespace
}  // namespace zeroshard::train

namespace zeroshard::train {
namespace {

// The model's device: the config's zeroshard.device unless --device says.
TEST(TrainFlagsTest, DeviceFromTheConfigUnlessTheFlagSays) {
  TrainFlags f;
  f.config = "ds.json";
  config::EngineConfig c;
  c.batch = {8, 4, 2, 1};  // train batch, micro-batch, accumulation, world
  std::vector<std::string> warnings;
  auto spec = TrainSpecFromFlags(f, c, &warnings);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->device, "cpu");
  c.zeroshard.device = "cuda";
  spec = TrainSpecFromFlags(f, c, &warnings);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->device, "cuda");
  f.device = "host-emulated";
  spec = TrainSpecFromFlags(f, c, &warnings);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->device, "host-emulated");
}

}  // namespace
}  // namespace zeroshard::train
