// Real-world configs, table-driven: Hugging Face Trainer configs with
// "auto" (testdata/hf_*.json) and DeepSpeedExamples-style ones
// (testdata/ds_*.json: scheduler, fp16, NVMe offload, aio, monitors), each
// row with the inputs a run would give (the flags of auto_inputs.h, parsed
// by ParseAutoInputs as the C API does), and what must come out: resolved
// values and their sources, warnings, server flags, or the error text.
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/config/auto_inputs.h"
#include "worker/config/ds_config.h"

namespace zeroshard::config {
namespace {

using ::testing::HasSubstr;

struct Row {
  std::string key, value, source;  // source: a substring of the row's
};

struct Case {
  const char* name;
  const char* file;  // under testdata/, or null with `json`
  const char* json;
  int world;
  const char* inputs;
  const char* error;  // substring of the error; null: must resolve
  std::vector<Row> rows;
  std::vector<std::string> warnings;  // substrings, each of some warning
  std::vector<std::string> server_flags;
};

const char kHfInputs[] =
    "--learning_rate=3e-4 --precision=bf16 --per_device_train_batch_size=4 "
    "--steps=1000 --warmup_steps=20 --hidden_size=128";

// The three keys sized from the model, as the error for their unfilled
// "auto" names them together.
#define ZS_MODEL_KEYS                                                      \
  "zero_optimization.reduce_bucket_size (it is hidden^2 of the model's "   \
  "hidden size, which is not known here), "                                \
  "zero_optimization.stage3_prefetch_bucket_size (it is 0.9 hidden^2 of "  \
  "the model's hidden size, which is not known here) and "                 \
  "zero_optimization.stage3_param_persistence_threshold (it is 10 hidden " \
  "of the model's hidden size, which is not known here): give the model"

std::vector<Case> Cases() {
  return {
      {"hf zero3: every auto from the flags and the model",
       "hf_zero3.json",
       nullptr,
       2,
       kHfInputs,
       nullptr,
       {{"train_batch_size", "8", "derived"},
        {"train_micro_batch_size_per_gpu", "4",
         "auto←--per_device_train_batch_size"},
        {"gradient_accumulation_steps", "1", "derived"},
        {"optimizer.params.lr", "0.0003", "auto←--learning_rate"},
        {"optimizer.params.betas", "[0.9, 0.999]", "--adam_beta1 (default)"},
        {"optimizer.params.eps", "1e-08", "auto←--adam_epsilon (default)"},
        {"optimizer.params.weight_decay", "0", "auto←--weight_decay"},
        {"scheduler.params.warmup_min_lr", "0", "auto←0"},
        {"scheduler.params.warmup_max_lr", "0.0003", "auto←--learning_rate"},
        {"scheduler.params.warmup_num_steps", "20", "auto←--warmup_steps"},
        {"scheduler.params.total_num_steps", "1000", "auto←--steps"},
        {"fp16.enabled", "false", "auto←--precision=bf16"},
        {"bf16.enabled", "true", "auto←--precision=bf16"},
        {"gradient_clipping", "1", "auto←--max_grad_norm (default)"},
        {"zero_optimization.reduce_bucket_size", "16384",
         "auto←model (hidden size 128 from --hidden_size): hidden^2"},
        {"zero_optimization.stage3_prefetch_bucket_size", "14745",
         "0.9 hidden^2"},
        {"zero_optimization.stage3_param_persistence_threshold", "1280",
         "10 hidden"},
        {"zero_optimization.stage", "3", "file"},
        {"zero_optimization.stage3_max_live_parameters", "1000000000", "file"},
        {"zero_optimization.allgather_bucket_size", "500000000", "default"}},
       {"offload_param.device: \"cpu\" is read as \"server\""},
       {}},
      {"hf zero3 without --learning_rate", "hf_zero3.json", nullptr, 2,
       "--precision=bf16 --per_device_train_batch_size=4 --steps=10 "
       "--hidden_size=8",
       "optimizer.params.lr: \"auto\" with nothing to fill it: give "
       "--learning_rate"},
      {"hf zero3 without --precision", "hf_zero3.json", nullptr, 2,
       "--learning_rate=1e-3 --per_device_train_batch_size=4 --steps=10 "
       "--hidden_size=8",
       "\"auto\" with nothing to fill it, in 2 keys: fp16.enabled and "
       "bf16.enabled: give --precision=fp32, fp16 or bf16"},
      {"hf zero3 with no inputs: every missing one named at once",
       "hf_zero3.json", nullptr, 2, "",
       "\"auto\" with nothing to fill it, in 8 keys: "
       "train_micro_batch_size_per_gpu: give --per_device_train_batch_size "
       "(or a train_batch_size in the config); optimizer.params.lr: give "
       "--learning_rate; scheduler.params.total_num_steps: give --steps; "
       "fp16.enabled and bf16.enabled: give --precision=fp32, fp16 or "
       "bf16; " ZS_MODEL_KEYS
       ": zeroshard train's --channels or --model_file, the C API's "
       "and zeroshard.Config's hidden_size"},
      {"hf zero3 without a micro-batch", "hf_zero3.json", nullptr, 2,
       "--learning_rate=1e-3 --precision=fp32 --steps=10 --hidden_size=8",
       "train_micro_batch_size_per_gpu: \"auto\" with nothing to fill it: "
       "give --per_device_train_batch_size"},
      {"hf zero3 without --steps (WarmupDecayLR's total)", "hf_zero3.json",
       nullptr, 2,
       "--learning_rate=1e-3 --precision=fp32 --per_device_train_batch_size=1 "
       "--hidden_size=8",
       "scheduler.params.total_num_steps: \"auto\" with nothing to fill it: "
       "give --steps"},
      {"hf zero3 without the model", "hf_zero3.json", nullptr, 2,
       "--learning_rate=1e-3 --precision=fp32 --per_device_train_batch_size=1 "
       "--steps=10",
       "\"auto\" with nothing to fill it, in 3 keys: " ZS_MODEL_KEYS},
      {"hf zero2: fp16, accumulation from the flag, buckets from the file",
       "hf_zero2.json",
       nullptr,
       2,
       "--learning_rate=5e-5 --precision=fp16 --per_device_train_batch_size=4 "
       "--gradient_accumulation_steps=2 --adam_beta2=0.98 --max_grad_norm=0.5",
       nullptr,
       {{"train_batch_size", "16",
         "auto←--per_device_train_batch_size x --gradient_accumulation_steps"},
        {"gradient_accumulation_steps", "2",
         "auto←--gradient_accumulation_steps"},
        {"optimizer.params.betas", "[0.9, 0.98]",
         "auto←--adam_beta1 (default), --adam_beta2"},
        {"fp16.enabled", "true", "auto←--precision=fp16"},
        {"fp16.initial_scale_power", "16", "file"},
        {"gradient_clipping", "0.5", "auto←--max_grad_norm"},
        {"zero_optimization.reduce_bucket_size", "200000000", "file"},
        {"scheduler.params.warmup_num_steps", "0",
         "auto←--warmup_steps (default)"}},
       {"zero_optimization.allgather_partitions: not used"},
       {}},
      {"a flag whose key is a number in the file",
       "ds_cifar_monitor.json",
       nullptr,
       4,
       "--learning_rate=0.5",
       nullptr,
       {{"optimizer.params.lr", "0.001", "file"},
        {"train_micro_batch_size_per_gpu", "16", "derived"},
        {"fp16.enabled", "true", "file"},
        {"fp16.initial_scale_power", "15", "file"}},
       {"--learning_rate is not used: it fills only \"auto\" values of "
        "optimizer.params.lr, scheduler.params.warmup_max_lr"},
       {}},
      {"DeepSpeedExamples-style NVMe offload and aio",
       "ds_nvme_aio.json",
       nullptr,
       2,
       "--steps=100",
       nullptr,
       {{"zero_optimization.offload_param.device", "\"nvme\"", "file"},
        {"zero_optimization.offload_param.nvme_path", "\"/local_nvme\"",
         "file"},
        {"aio.block_size", "1048576", "file"},
        {"aio.thread_count", "1", "file"},
        {"scheduler.params.total_num_steps", "100", "file"}},
       {"zero_optimization.offload_optimizer.device \"nvme\": the shard "
        "servers keep the optimizer state on NVMe when each runs with "
        "--storage=nvme --nvme_path=/local_nvme --aio_block_size=1048576 "
        "--aio_queue_depth=8 --aio_intra_op_parallelism=1",
        "aio.single_submit: not used by zeroshard",
        "zero_optimization.offload_param.buffer_size: not used"},
       {"--storage=nvme", "--nvme_path=/local_nvme", "--aio_block_size=1048576",
        "--aio_queue_depth=8", "--aio_intra_op_parallelism=1"}},
      {"--steps disagrees with total_num_steps",
       "ds_nvme_aio.json",
       nullptr,
       2,
       "--steps=2000",
       nullptr,
       {{"scheduler.params.total_num_steps", "100", "file"}},
       {"scheduler.params.total_num_steps (100) differs from --steps (2000): "
        "the WarmupDecayLR schedule assumes 100 steps; write \"auto\" to "
        "follow --steps"},
       {"--storage=nvme", "--nvme_path=/local_nvme", "--aio_block_size=1048576",
        "--aio_queue_depth=8", "--aio_intra_op_parallelism=1"}},
      {"a misspelt section is an error, not stage 0", nullptr,
       R"({"train_batch_size": 8, "zero_optimisation": {"stage": 3}})", 1, "",
       "unknown key zero_optimisation (did you mean zero_optimization?)"},
      {"a misspelt nested key", nullptr,
       R"({"train_batch_size": 8, "zero_optimization": {"stgae": 3}})", 1, "",
       "unknown key zero_optimization.stgae (did you mean "
       "zero_optimization.stage?)"},
      {"an unknown key far from any stays a warning",
       nullptr,
       R"({"train_batch_size": 8, "my_notes": "x"})",
       1,
       "",
       nullptr,
       {{"train_batch_size", "8", "file"}},
       {"unknown key my_notes ignored"}},
      {"trailing commas, comments and a byte-order mark, as DeepSpeed's "
       "hjson.load reads files",
       nullptr,
       "\xEF\xBB\xBF{\"train_batch_size\": 8, # eight\n"
       "  // the optimizer\n  \"optimizer\": {\"params\": {\"betas\": "
       "[0.9, 0.99,]}}, /* end */\n}",
       1,
       "",
       nullptr,
       {{"train_batch_size", "8", "file"},
        {"optimizer.params.betas", "[0.9, 0.99]", "file"}},
       {}},
      {"a comment left open", nullptr, "{\"train_batch_size\": 8 /* eight\n}",
       1, "", "invalid JSON at line 1, column 24: a /* comment without its */"},
      {"a missing comma is still an error", nullptr,
       "{\"train_batch_size\": 8 \"gradient_clipping\": 1}", 1, "",
       "invalid JSON at line 1, column 24: Expecting ',' delimiter"},
      {"NaN is JSON to json.load, and a bad clipping here", nullptr,
       R"({"train_batch_size": 8, "gradient_clipping": NaN})", 1, "",
       "gradient_clipping: must be a non-negative number, got nan"},
      {"Infinity likewise", nullptr,
       R"({"train_batch_size": 8, "optimizer": {"params": {"lr": Infinity}}})",
       1, "", "optimizer.params.lr: must be a non-negative number, got inf"},
      {"an auto nothing in zeroshard fills", nullptr,
       R"({"train_batch_size": 8, "fp16": {"loss_scale": "auto"}})", 1, "",
       "fp16.loss_scale: is \"auto\", which zeroshard fills only for"},
      {"nvme without nvme_path", nullptr,
       R"({"train_batch_size": 8, "zero_optimization": {"stage": 2,
           "offload_optimizer": {"device": "nvme"}}})",
       1, "",
       "zero_optimization.offload_optimizer.nvme_path: required with "
       "\"device\": \"nvme\""},
      {"two nvme paths", nullptr,
       R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
           "offload_optimizer": {"device": "nvme", "nvme_path": "/a"},
           "offload_param": {"device": "nvme", "nvme_path": "/b"}}})",
       1, "",
       "zero_optimization.offload_param.nvme_path: \"/b\" differs from \"/a\""},
      {"aio without nvme is a warning",
       nullptr,
       R"({"train_batch_size": 8, "aio": {"block_size": 4096}})",
       1,
       "",
       nullptr,
       {},
       {"aio: used only with an offload to \"nvme\"; ignored"}},
      {"a bad input names its flag", "hf_zero3.json", nullptr, 2,
       "--learning_rat=1e-3",
       "unknown flag --learning_rat (did you mean "
       "--learning_rate?)"},
      {"an input out of range", "hf_zero3.json", nullptr, 2, "--adam_beta1=1.5",
       "--adam_beta1 must be in [0, 1), got 1.5"},
  };
}

ResolvedKey Find(const std::vector<ResolvedKey>& rows, const std::string& key) {
  for (const ResolvedKey& r : rows) {
    if (r.key == key) return r;
  }
  return {};
}

TEST(ConfigCasesTest, RealConfigs) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    absl::StatusOr<EngineConfig> config = absl::UnknownError("not run");
    std::vector<std::string> warnings;
    absl::StatusOr<AutoInputs> in = ParseAutoInputs(c.inputs);
    if (!in.ok()) {
      config = in.status();
    } else if (c.file != nullptr) {
      config = ParseDeepSpeedConfigFile(
          std::string("worker/config/testdata/") + c.file, c.world, *in,
          &warnings);
    } else {
      config = ParseDeepSpeedConfig(c.json, c.world, *in, &warnings);
    }
    if (c.error != nullptr) {
      ASSERT_FALSE(config.ok());
      EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(std::string(config.status().message()), HasSubstr(c.error));
      continue;
    }
    ASSERT_TRUE(config.ok()) << config.status();
    for (const Row& want : c.rows) {
      const ResolvedKey got = Find(config->resolved, want.key);
      EXPECT_EQ(got.key, want.key) << "no row for " << want.key;
      EXPECT_EQ(got.value, want.value) << want.key;
      EXPECT_THAT(got.source, HasSubstr(want.source)) << want.key;
    }
    const std::string all = absl::StrJoin(warnings, "\n");
    for (const std::string& w : c.warnings) {
      EXPECT_THAT(all, HasSubstr(w));
    }
    EXPECT_EQ(NvmeServerFlags(*config), c.server_flags);
    // The table shows every auto row, each once.
    const std::string autos = RenderResolvedTable(config->resolved, true);
    for (const ResolvedKey& r : config->resolved) {
      EXPECT_EQ(autos.find(r.key + " ") != std::string::npos, IsAutoRow(r))
          << r.key;
    }
  }
}

// The values an "auto" becomes reach the engine's fields, not only the
// table.
TEST(ConfigCasesTest, AutosReachTheEngineConfig) {
  absl::StatusOr<AutoInputs> in = ParseAutoInputs(kHfInputs);
  ASSERT_TRUE(in.ok());
  auto c = ParseDeepSpeedConfigFile("worker/config/testdata/hf_zero3.json", 2,
                                    *in, nullptr);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->optimizer.lr, 3e-4);
  EXPECT_EQ(c->lr_schedule.warmup_max_lr, 3e-4);
  EXPECT_EQ(c->lr_schedule.total_num_steps, 1000);
  EXPECT_EQ(c->lr_schedule.warmup_num_steps, 20);
  EXPECT_EQ(c->precision, engine::Precision::kBf16);
  EXPECT_EQ(c->gradient_clipping, 1.0);
  EXPECT_EQ(c->batch.micro_batch_per_worker, 4);
  EXPECT_EQ(c->zero.reduce_bucket_size, 128 * 128);
  EXPECT_EQ(c->zero.offload_param, OffloadDevice::kServer);
}

TEST(ConfigCasesTest, AutoFlagsRoundTrip) {
  absl::StatusOr<AutoInputs> in = ParseAutoInputs(
      "--learning_rate=0.1 --adam_beta2=0.95 --precision=fp16 "
      "--per_device_train_batch_size=3 --warmup_steps=0");
  ASSERT_TRUE(in.ok()) << in.status();
  const std::string args = absl::StrJoin(AutoFlagsArgv(*in), " ");
  absl::StatusOr<AutoInputs> back = ParseAutoInputs(args);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == *in) << args;
  EXPECT_TRUE(AutoFlagsArgv(AutoInputs{}).empty());
}

}  // namespace
}  // namespace zeroshard::config
