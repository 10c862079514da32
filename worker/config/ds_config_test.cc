#include "worker/config/ds_config.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace zeroshard::config {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::UnorderedElementsAre;

// Bazel runs tests from the runfiles workspace root.
std::string TestData(const std::string& name) {
  return "worker/config/testdata/" + name;
}

TEST(DsConfigTest, FullZero3Config) {
  std::vector<std::string> warnings;
  auto c = ParseDeepSpeedConfigFile(TestData("ds_config_zero3.json"),
                                    /*world_size=*/2, &warnings);
  ASSERT_TRUE(c.ok()) << c.status();
  // Keys read and reported but acted on by nothing say so.
  const std::string file = TestData("ds_config_zero3.json");
  EXPECT_THAT(
      warnings,
      UnorderedElementsAre(
          file + ": zero_optimization.contiguous_gradients: not used by "
                 "zeroshard (gradients are always reduced in one contiguous "
                 "buffer); ignored",
          file + ": zero_optimization.reduce_scatter: not used by zeroshard "
                 "(stages 1-2 always reduce-scatter the gradients); ignored",
          file + ": zero_optimization.sub_group_size: not used by zeroshard "
                 "(the servers' optimizer sub-groups are zeroshard-server's "
                 "--sub_group_size); ignored"));
  EXPECT_EQ(c->batch.train_batch_size, 32);
  EXPECT_EQ(c->batch.micro_batch_per_worker, 4);
  EXPECT_EQ(c->batch.gradient_accumulation_steps, 4);
  EXPECT_EQ(c->batch.world_size, 2);
  EXPECT_EQ(c->gradient_clipping, 1.0);
  EXPECT_EQ(c->optimizer.type, "AdamW");
  EXPECT_EQ(c->optimizer.lr, 6e-4);
  EXPECT_EQ(c->optimizer.beta1, 0.9);
  EXPECT_EQ(c->optimizer.beta2, 0.95);
  EXPECT_EQ(c->optimizer.eps, 1e-8);
  EXPECT_EQ(c->optimizer.weight_decay, 0.1);
  EXPECT_EQ(c->lr_schedule.type, engine::LrScheduleType::kWarmupCosineLR);
  EXPECT_EQ(c->lr_schedule.lr, 6e-4);
  EXPECT_EQ(c->lr_schedule.total_num_steps, 1000);
  EXPECT_EQ(c->lr_schedule.warmup_num_steps, 50);
  EXPECT_EQ(c->lr_schedule.warmup_min_ratio, 0.0);
  EXPECT_EQ(c->lr_schedule.cos_min_ratio, 0.1);
  EXPECT_EQ(c->lr_schedule.warmup_type, engine::WarmupType::kLinear);
  EXPECT_EQ(c->precision, engine::Precision::kBf16);
  EXPECT_FALSE(c->loss_scaler.dynamic);
  EXPECT_EQ(c->loss_scaler.static_scale, 1.0);
  EXPECT_EQ(c->zero.stage, 3);
  EXPECT_TRUE(c->zero.overlap_comm);
  EXPECT_TRUE(c->zero.contiguous_gradients);
  EXPECT_TRUE(c->zero.reduce_scatter);
  EXPECT_EQ(c->zero.reduce_bucket_size, 50000000);
  EXPECT_EQ(c->zero.allgather_bucket_size, 50000000);
  EXPECT_EQ(c->zero.stage3_prefetch_bucket_size, 20000000);
  EXPECT_EQ(c->zero.stage3_max_live_parameters, 100000000);
  EXPECT_EQ(c->zero.stage3_max_reuse_distance, 100000000);
  EXPECT_EQ(c->zero.stage3_param_persistence_threshold, 10000);
  EXPECT_EQ(c->zero.sub_group_size, 1000000000);
  EXPECT_EQ(c->zero.offload_param, OffloadDevice::kServer);
  EXPECT_EQ(c->zeroshard.num_servers, 2);
  EXPECT_THAT(c->zeroshard.server_addresses, IsEmpty());
  EXPECT_FALSE(c->zeroshard.server_aggregation);
  EXPECT_EQ(c->zeroshard.alignment, 64u);
  EXPECT_THAT(c->auto_keys, IsEmpty());
  EXPECT_EQ(DescribeEngineConfig(*c),
            "stage 3 (offload_param=server), bf16, batch 32 = 4 x 4 x 2 "
            "workers, AdamW lr 0.0006 wd 0.1, WarmupCosineLR, clip 1, "
            "2 servers");
}

TEST(DsConfigTest, Zero2Fp16Config) {
  std::vector<std::string> warnings;
  auto c = ParseDeepSpeedConfigFile(TestData("ds_config_zero2_fp16.json"),
                                    /*world_size=*/4, &warnings);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->batch.train_batch_size, 64);  // 8 * 2 * 4
  EXPECT_EQ(c->optimizer.type, "Adam");      // adam_w_mode defaults to true
  EXPECT_EQ(c->optimizer.weight_decay, 0.01);
  EXPECT_EQ(c->lr_schedule.type, engine::LrScheduleType::kWarmupDecayLR);
  EXPECT_EQ(c->lr_schedule.warmup_max_lr, 1e-4);
  EXPECT_EQ(c->lr_schedule.total_num_steps, 10000);
  EXPECT_EQ(c->lr_schedule.warmup_type, engine::WarmupType::kLog);
  EXPECT_EQ(c->precision, engine::Precision::kFp16);
  EXPECT_TRUE(c->loss_scaler.dynamic);
  EXPECT_EQ(c->loss_scaler.initial_scale, 4096.0);
  EXPECT_EQ(c->loss_scaler.scale_window, 500);
  EXPECT_EQ(c->loss_scaler.hysteresis, 3);
  EXPECT_EQ(c->loss_scaler.min_scale, 0.5);
  EXPECT_EQ(c->zero.stage, 2);
  EXPECT_FALSE(c->zero.overlap_comm);  // DeepSpeed: default is stage == 3
  EXPECT_THAT(c->zeroshard.server_addresses,
              ElementsAre("127.0.0.1:7001", "127.0.0.1:7002", "[::1]:7003"));
  EXPECT_EQ(c->zeroshard.num_servers, 3);
  EXPECT_TRUE(c->zeroshard.server_aggregation);
  const std::string file = TestData("ds_config_zero2_fp16.json");
  EXPECT_THAT(
      warnings,
      ElementsAre(
          file + ": zero_optimization.offload_optimizer: not used by "
                 "zeroshard (optimizer state always lives on the shard "
                 "servers); ignored",
          file + ": zero_optimization.round_robin_gradients: not used by "
                 "zeroshard (a DeepSpeed implementation detail); ignored",
          file + ": steps_per_print: not used by zeroshard (the launcher "
                 "reports progress); ignored"));
}

TEST(DsConfigTest, Defaults) {
  std::vector<std::string> warnings;
  auto c = ParseDeepSpeedConfigFile(TestData("minimal.json"), 3, &warnings);
  ASSERT_TRUE(c.ok()) << c.status();
  // DeepSpeed has no default optimizer: the one that runs is named.
  EXPECT_THAT(warnings,
              ElementsAre(HasSubstr("the config has no optimizer section, "
                                    "or one without a type (DeepSpeed builds "
                                    "no optimizer then): the servers run "
                                    "AdamW with lr 0.001 (the default")));
  EXPECT_EQ(c->batch.train_batch_size, 12);
  EXPECT_EQ(c->batch.gradient_accumulation_steps, 1);
  EXPECT_EQ(c->gradient_clipping, 0.0);
  EXPECT_EQ(c->optimizer.lr, 1e-3);
  EXPECT_EQ(c->optimizer.beta1, 0.9);
  EXPECT_EQ(c->optimizer.beta2, 0.999);
  EXPECT_EQ(c->optimizer.eps, 1e-8);
  EXPECT_EQ(c->optimizer.weight_decay, 0.0);
  EXPECT_EQ(c->lr_schedule.type, engine::LrScheduleType::kConstant);
  EXPECT_EQ(engine::LearningRate(c->lr_schedule, 7), 1e-3);
  EXPECT_EQ(c->precision, engine::Precision::kFp32);
  EXPECT_FALSE(c->loss_scaler.dynamic);
  EXPECT_EQ(c->loss_scaler.static_scale, 1.0);
  EXPECT_EQ(c->zero.stage, 0);
  EXPECT_FALSE(c->zero.overlap_comm);
  EXPECT_TRUE(c->zero.contiguous_gradients);
  EXPECT_TRUE(c->zero.reduce_scatter);
  EXPECT_EQ(c->zero.reduce_bucket_size, 500000000);
  EXPECT_EQ(c->zero.allgather_bucket_size, 500000000);
  EXPECT_EQ(c->zero.stage3_prefetch_bucket_size, 50000000);
  EXPECT_EQ(c->zero.stage3_max_live_parameters, 1000000000);
  EXPECT_EQ(c->zero.stage3_max_reuse_distance, 1000000000);
  EXPECT_EQ(c->zero.stage3_param_persistence_threshold, 100000);
  EXPECT_EQ(c->zero.sub_group_size, 1000000000);
  EXPECT_EQ(c->zero.offload_param, OffloadDevice::kNone);
  EXPECT_EQ(c->zeroshard.num_servers, 0);
  EXPECT_FALSE(c->zeroshard.server_aggregation);
  EXPECT_EQ(c->zeroshard.alignment, 64u);
}

// DeepSpeed's scaler by stage (runtime/config.py
// get_dynamic_loss_scale_args, fp16/loss_scaler.py, fp16/fused_optimizer.py):
// at stages 1-3 an fp16 section naming no scaler key gets
// DynamicLossScaler()'s 2^32 and no hysteresis, one naming any gets the
// config's defaults (2^16, hysteresis 2); stage 0's optimizer has no
// hysteresis.
TEST(DsConfigTest, Fp16Defaults) {
  std::vector<std::string> warnings;
  auto c = ParseDeepSpeedConfig(
      R"({"train_batch_size": 8, "fp16": {"enabled": true},
          "zero_optimization": {"stage": 1}})",
      1, nullptr);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->loss_scaler.dynamic);
  EXPECT_EQ(c->loss_scaler.initial_scale, 4294967296.0);  // 2^32
  EXPECT_EQ(c->loss_scaler.scale_window, 1000);
  EXPECT_EQ(c->loss_scaler.hysteresis, 1);
  EXPECT_FALSE(c->loss_scaler.consecutive_hysteresis);
  EXPECT_EQ(c->loss_scaler.min_scale, 1.0);
  EXPECT_TRUE(c->loss_scaler.raise_error_at_min_scale);
  EXPECT_THAT(RenderResolvedTable(c->resolved, false),
              HasSubstr("DeepSpeed's DynamicLossScaler at stages 1-3"));

  c = ParseDeepSpeedConfig(
      R"({"train_batch_size": 8, "fp16": {"enabled": true,
          "loss_scale_window": 500}, "zero_optimization": {"stage": 3}})",
      1, nullptr);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->loss_scaler.initial_scale, 65536.0);  // 2^16
  EXPECT_EQ(c->loss_scaler.hysteresis, 2);

  c = ParseDeepSpeedConfig(
      R"({"train_batch_size": 8, "fp16": {"enabled": true, "hysteresis": 4}})",
      1, &warnings);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->loss_scaler.initial_scale, 65536.0);
  EXPECT_EQ(c->loss_scaler.hysteresis, 1);
  EXPECT_THAT(absl::StrJoin(warnings, "\n"),
              HasSubstr("fp16.hysteresis (4) is not used at "
                        "zero_optimization.stage 0"));

  c = ParseDeepSpeedConfig(
      R"({"train_batch_size": 8, "fp16": {"enabled": true, "loss_scale": 128}})",
      1, nullptr);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->loss_scaler.dynamic);
  EXPECT_EQ(c->loss_scaler.static_scale, 128.0);
}

TEST(DsConfigTest, BatchSizeResolution) {
  struct Case {
    int64_t train, micro, gas;
    int world;
    int64_t want_train, want_micro, want_gas;
  };
  const Case cases[] = {
      {32, 4, 2, 4, 32, 4, 2},    // all three, consistent
      {32, 4, -1, 4, 32, 4, 2},   // gas derived
      {32, -1, 2, 4, 32, 4, 2},   // micro derived
      {-1, 4, 2, 4, 32, 4, 2},    // train derived
      {32, -1, -1, 4, 32, 8, 1},  // train alone: gas 1
      {-1, 4, -1, 4, 16, 4, 1},   // micro alone: gas 1
      {7, 7, -1, 1, 7, 7, 1},
  };
  for (const Case& c : cases) {
    auto b = ResolveBatchSizes(c.train, c.micro, c.gas, c.world);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->train_batch_size, c.want_train);
    EXPECT_EQ(b->micro_batch_per_worker, c.want_micro);
    EXPECT_EQ(b->gradient_accumulation_steps, c.want_gas);
    EXPECT_EQ(b->world_size, c.world);
  }
}

TEST(DsConfigTest, BatchSizeErrors) {
  struct Case {
    int64_t train, micro, gas;
    int world;
    const char* message;
  };
  const Case cases[] = {
      {32, 4, 2, 2,
       "train_batch_size (32) must equal train_micro_batch_size_per_gpu (4) "
       "* gradient_accumulation_steps (2) * world size (2) = 16"},
      {10, 3, -1, 1,
       "train_batch_size (10) must be a multiple of "
       "train_micro_batch_size_per_gpu (3) * world size (1) = 3"},
      {8, 16, -1, 1,  // DeepSpeed: gas = 8 // 16 = 0
       "train_batch_size (8) must be a multiple of "
       "train_micro_batch_size_per_gpu (16) * world size (1) = 16"},
      {10, -1, 3, 1,
       "train_batch_size (10) must be a multiple of "
       "gradient_accumulation_steps (3) * world size (1) = 3"},
      {10, -1, -1, 4,
       "train_batch_size (10) must be a multiple of world size 4"},
      {-1, -1, 2, 1,
       "train_batch_size or train_micro_batch_size_per_gpu must be given"},
      {-1, -1, -1, 1,
       "train_batch_size or train_micro_batch_size_per_gpu must be given"},
      {8, -1, -1, 0, "world size must be >= 1, got 0"},
      // Sizes the engine's int cannot count (and products that would
      // overflow int64_t).
      {-1, 2147483647, 2147483647, 4,
       "batch sizes above 2147483647: train_batch_size -1, "
       "train_micro_batch_size_per_gpu 2147483647, "
       "gradient_accumulation_steps 2147483647, world size 4 (-1: not "
       "given)"},
      {4294967296, -1, -1, 1,
       "batch sizes above 2147483647: train_batch_size 4294967296, "
       "train_micro_batch_size_per_gpu -1, gradient_accumulation_steps -1, "
       "world size 1 (-1: not given)"},
  };
  for (const Case& c : cases) {
    auto b = ResolveBatchSizes(c.train, c.micro, c.gas, c.world);
    ASSERT_FALSE(b.ok()) << c.message;
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(b.status().message(), c.message);
  }
  // Through the JSON, too.
  auto c = ParseDeepSpeedConfig(
      R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4,
          "gradient_accumulation_steps": 2})",
      2, nullptr);
  EXPECT_THAT(c.status().message(), HasSubstr("= 16"));
  // A key beyond an int is named (it used to reach the engine wrapped to
  // a negative micro-batch).
  for (const char* key : {"train_batch_size", "train_micro_batch_size_per_gpu",
                          "gradient_accumulation_steps"}) {
    auto big = ParseDeepSpeedConfig(absl::StrCat("{\"", key, "\": 4294967296}"),
                                    1, nullptr);
    ASSERT_FALSE(big.ok()) << key;
    EXPECT_THAT(big.status().message(), HasSubstr(key));
    EXPECT_THAT(big.status().message(), HasSubstr("2147483647"));
  }
}

TEST(DsConfigTest, ErrorsNameTheirKey) {
  struct Case {
    const char* json;  // spliced into {"train_batch_size": 8, ...}
    const char* message;
  };
  const Case cases[] = {
      {R"("zero_optimization": {"reduce_bucket_size": -1})",
       "zero_optimization.reduce_bucket_size: must be a non-negative "
       "integer, got -1"},
      {R"("zero_optimization": {"allgather_bucket_size": 1.5})",
       "zero_optimization.allgather_bucket_size: must be a non-negative "
       "integer, got 1.5"},
      {R"("zero_optimization": {"sub_group_size": "big"})",
       "zero_optimization.sub_group_size: must be a non-negative integer, "
       "got \"big\""},
      {R"("zero_optimization": {"stage": 4})",
       "zero_optimization.stage: must be an integer in [0, 3], got 4"},
      {R"("zero_optimization": {"stage": 3, "overlap_comm": "yes"})",
       "zero_optimization.overlap_comm: must be true or false, got \"yes\""},
      {R"("zero_optimization": 2)",
       "zero_optimization: must be an object, got 2"},
      {R"("optimizer": {"params": {"max_grad_norm": 1.0}})",
       "optimizer.params.max_grad_norm: not an optimizer parameter (DeepSpeed "
       "refuses it too): give the top-level gradient_clipping"},
      {R"("zero_optimization": {"stage": 3,
          "offload_param": {"device": "nvme"}})",
       "zero_optimization.offload_param.nvme_path: required with "
       "\"device\": \"nvme\""},
      {R"("zero_optimization": {"stage": 3,
          "offload_param": {"device": "disk"}})",
       "zero_optimization.offload_param.device: must be \"none\", "
       "\"server\", \"cpu\" or \"nvme\", got \"disk\""},
      {R"("fp16": {"enabled": true}, "bf16": {"enabled": true})",
       "bf16.enabled: fp16 and bf16 cannot both be enabled"},
      {R"("fp16": {"enabled": true, "hysteresis": 0})",
       "fp16.hysteresis: must be a positive integer, got 0"},
      {R"("fp16": {"enabled": true, "min_loss_scale": 0})",
       "fp16.min_loss_scale: must be a positive number, got 0"},
      {R"("fp16": {"enabled": true, "loss_scale_window": 2.5})",
       "fp16.loss_scale_window: must be a positive integer, got 2.5"},
      {R"("gradient_clipping": -1)",
       "gradient_clipping: must be a non-negative number, got -1"},
      {R"("gradient_accumulation_steps": 0)",
       "gradient_accumulation_steps: must be an integer in [1, 2147483647], "
       "got 0"},
      {R"("optimizer": {"type": "Lamb"})",
       "optimizer.type: must be Adam or AdamW (the shard servers run "
       "AdamW), got \"Lamb\""},
      {R"("optimizer": {"type": "Adam", "params": {"adam_w_mode": false,
          "weight_decay": 0.01}})",
       "optimizer.params.adam_w_mode: false (Adam with L2 weight decay) is "
       "not supported"},
      {R"("optimizer": {"params": {"lr": -0.1}})",
       "optimizer.params.lr: must be a non-negative number, got -0.1"},
      {R"("optimizer": {"params": {"betas": [0.9]}})",
       "optimizer.params.betas: must be an array of 2 numbers, got [0.9]"},
      {R"("optimizer": {"params": {"betas": [0.9, 1.5]}})",
       "optimizer.params.betas: must be two numbers in [0, 1), got [0.9, "
       "1.5]"},
      {R"("optimizer": {"params": {"eps": 0}})",
       "optimizer.params.eps: must be a positive number, got 0"},
      {R"("optimizer": {"params": {"amsgrad": true}})",
       "optimizer.params.amsgrad: only false is supported"},
      {R"("optimizer": {"type": "OneBitAdam", "params": {"freeze_step": 2}})",
       "optimizer.type: \"OneBitAdam\" is Adam with compressed gradient "
       "exchange; the shard servers run exact AdamW: write \"Adam\""},
      {R"("scheduler": {"params": {}})",
       "scheduler.type: required: WarmupLR, WarmupDecayLR or WarmupCosineLR"},
      {R"("scheduler": {"type": "OneCycle"})",
       "scheduler.type: must be WarmupLR, WarmupDecayLR or WarmupCosineLR, "
       "got \"OneCycle\""},
      {R"("scheduler": {"type": "WarmupDecayLR", "params": {}})",
       "scheduler.params.total_num_steps: required by WarmupDecayLR"},
      {R"("scheduler": {"type": "WarmupCosineLR",
          "params": {"total_num_steps": 10, "warmup_num_steps": 10}})",
       "scheduler.params.total_num_steps: must differ from the warmup "
       "length 10"},
      {R"("scheduler": {"type": "WarmupLR", "params": {"warmup_type": "exp"}})",
       "scheduler.params.warmup_type: must be \"log\" or \"linear\", got "
       "\"exp\""},
      {R"("scheduler": {"type": "WarmupLR",
          "params": {"last_batch_iteration": 5}})",
       "scheduler.params.last_batch_iteration: only -1 is supported"},
      {R"("zeroshard": {"servers": []})",
       "zeroshard.servers: must be a positive count or a non-empty array of "
       "\"host:port\" strings, got []"},
      {R"("zeroshard": {"servers": 0})",
       "zeroshard.servers: must be an integer in [1, 1048576], got 0"},
      {R"("zeroshard": {"servers": ["a:1", "nohost"]})",
       "zeroshard.servers[1]: must be a \"host:port\" string, got \"nohost\""},
      {R"("zeroshard": {"servers": ["a:99999"]})",
       "zeroshard.servers[0]: must be a \"host:port\" string, got \"a:99999\""},
      {R"("zeroshard": {"servers": ["a:1", "a:1"]})",
       "zeroshard.servers[1]: duplicate address \"a:1\""},
      {R"("zeroshard": {"alignment": 0})",
       "zeroshard.alignment: must be an integer in [1, 4294967295], got 0"},
      {R"("zeroshard": {"server_aggregation": 1})",
       "zeroshard.server_aggregation: must be true or false, got 1"},
      {R"("zeroshard": {"device": "gpu"})",
       "zeroshard.device: must be \"cpu\", \"cuda\" or \"host-emulated\", "
       "got \"gpu\""},
  };
  for (const Case& c : cases) {
    const std::string json =
        std::string(R"({"train_batch_size": 8, )") + c.json + "}";
    auto config = ParseDeepSpeedConfig(json, 1, nullptr);
    ASSERT_FALSE(config.ok()) << json;
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(config.status().message(), HasSubstr(c.message)) << json;
  }
}

TEST(DsConfigTest, FileErrorsNameTheFile) {
  auto c =
      ParseDeepSpeedConfigFile(TestData("invalid_syntax.json"), 1, nullptr);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            TestData("invalid_syntax.json") +
                ": invalid JSON at line 5, column 5: Expecting ',' "
                "delimiter");
  c = ParseDeepSpeedConfigFile(TestData("missing.json"), 1, nullptr);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(c.status().message(), HasSubstr("missing.json"));
}

TEST(DsConfigTest, InvalidJsonHasPosition) {
  struct Case {
    const char* json;
    const char* message;
  };
  const Case cases[] = {
      {R"({"train_batch_size": tru})",
       "invalid JSON at line 1, column 22: Expecting value"},
      {"{\n  \"a\": 1,\n  \"b\" 2\n}",
       "invalid JSON at line 3, column 7: Expecting ':' delimiter"},
      {"", "invalid JSON at line 1, column 1: Expecting value"},
      {"[1, 2]", "the config must be a JSON object"},
      {R"({"train_batch_size": 8, "train_batch_size": 8})",
       "invalid JSON at line 1, column 25: duplicate key \"train_batch_size\""},
  };
  for (const Case& c : cases) {
    auto config = ParseDeepSpeedConfig(c.json, 1, nullptr);
    ASSERT_FALSE(config.ok()) << c.json;
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(config.status().message(), HasSubstr(c.message)) << c.json;
  }
}

TEST(DsConfigTest, FeaturesNotImplementedSaySoByName) {
  // Megatron-DeepSpeed and DeepSpeedExamples configs carry these.
  std::vector<std::string> warnings;
  auto c = ParseDeepSpeedConfig(R"({
      "train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW"},
      "data_types": {"grad_accum_dtype": "fp32"},
      "curriculum_learning": {"enabled": true, "curriculum_type": "seqlen"},
      "progressive_layer_drop": {"enabled": true, "theta": 0.5}})",
                                1, &warnings);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(warnings,
              ElementsAre("data_types: not used by zeroshard "
                          "(zeroshard-worker accumulates gradients in fp32, "
                          "Python in the module's dtype); ignored",
                          "curriculum_learning: not used by zeroshard (not "
                          "implemented: the run trains without it); ignored",
                          "progressive_layer_drop: not used by zeroshard (not "
                          "implemented: the run trains without it); ignored"));
}

TEST(DsConfigTest, UnknownKeysWarnWithTheirPath) {
  std::vector<std::string> warnings;
  auto c = ParseDeepSpeedConfig(R"({
      "train_micro_batch_size_per_gpu": 1, "foo": 1,
      "optimizer": {"type": "AdamW", "params": {"qux": 1}, "extra": {}},
      "scheduler": {"type": "WarmupLR", "params": {"cos_min_ratio": 0.1}},
      "fp16": {"enabled": false, "bogus": 1},
      "zero_optimization": {"stage": 3, "bar": 2,
          "offload_param": {"device": "none", "baz": 3}},
      "zeroshard": {"x": 1}})",
                                1, &warnings);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(warnings,
              ElementsAre("unknown key optimizer.params.qux ignored",
                          "unknown key optimizer.extra ignored",
                          "unknown key scheduler.params.cos_min_ratio ignored",
                          "unknown key fp16.bogus ignored",
                          "unknown key zero_optimization.offload_param.baz "
                          "ignored",
                          "unknown key zero_optimization.bar ignored",
                          "unknown key zeroshard.x ignored",
                          "unknown key foo ignored"));
}

TEST(DsConfigTest, DeepSpeedWarningsAndAliases) {
  std::vector<std::string> warnings;
  auto c = ParseDeepSpeedConfig(R"({
      "train_batch_size": 4, "bfloat16": {"enabled": true},
      "optimizer": {"type": "AdamW"},
      "scheduler": {"type": "WarmupDecayLR",
                    "params": {"warmup_num_steps": 100, "total_num_steps": 50}},
      "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu",
                                                          "pin_memory": true}}
      })",
                                1, &warnings);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->precision, engine::Precision::kBf16);
  EXPECT_EQ(c->zero.offload_param, OffloadDevice::kServer);
  EXPECT_THAT(
      warnings,
      ElementsAre("scheduler.params.total_num_steps (50) is less than "
                  "warmup_num_steps (100)",
                  "zero_optimization.offload_param.device: \"cpu\" is read "
                  "as \"server\"",
                  "zero_optimization.offload_param.pin_memory: not used by "
                  "zeroshard (a DeepSpeed implementation detail); ignored"));
}

// DeepSpeedZeroConfig takes each stage3_* key also under its field name
// (axolotl's zero3 configs write max_live_parameters, max_reuse_distance,
// gather_16bit_weights_on_model_save): read as the stage3_ key, "auto"
// included; both names with different values are an error naming both.
TEST(DsConfigTest, ZeroFieldNamesAreTheStage3Keys) {
  std::vector<std::string> warnings;
  AutoInputs in;
  in.hidden_size = 100;
  auto c = ParseDeepSpeedConfig(R"({
      "train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW"},
      "zero_optimization": {"stage": 3, "max_live_parameters": 0,
          "max_reuse_distance": 7, "stage3_max_reuse_distance": 7,
          "prefetch_bucket_size": "auto", "param_persistence_threshold": 12,
          "gather_16bit_weights_on_model_save": true,
          "model_persistence_threshold": 5}})",
                                1, in, &warnings);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->zero.stage3_max_live_parameters, 0);
  EXPECT_EQ(c->zero.stage3_max_reuse_distance, 7);
  EXPECT_EQ(c->zero.stage3_prefetch_bucket_size, 9000);  // 0.9 hidden^2
  EXPECT_EQ(c->zero.stage3_param_persistence_threshold, 12);
  const std::string all = absl::StrJoin(warnings, "\n");
  EXPECT_THAT(all, Not(HasSubstr("unknown key")));
  EXPECT_THAT(all, HasSubstr("zero_optimization.stage3_gather_16bit_weights_"
                             "on_model_save: not used by zeroshard"));

  c = ParseDeepSpeedConfig(R"({
      "train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW"},
      "zero_optimization": {"stage": 3, "max_reuse_distance": 5,
          "stage3_max_reuse_distance": 1e9}})",
                           1, nullptr);
  EXPECT_EQ(c.status().message(),
            "zero_optimization.max_reuse_distance (5) and "
            "zero_optimization.stage3_max_reuse_distance (1000000000) are one "
            "DeepSpeed setting under two names and differ: give one");
}

// Keys of current DeepSpeed that zeroshard does not act on are named as
// such, not as unknown; gradient_allreduce_op "sum" (which would change
// the arithmetic) is an error, and dataloader_drop_last (Python's
// deepspeed_io) is checked.
TEST(DsConfigTest, CurrentDeepSpeedKeysAreKnown) {
  std::vector<std::string> warnings;
  auto c = ParseDeepSpeedConfig(R"({
      "train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW"},
      "bf16": {"enabled": true, "check_grad_overflow": true,
               "bf16_master_weights_and_grads": false,
               "bf16_optimizer_states": false},
      "torch_autocast": {"enabled": false}, "tensor_parallel": {"tp_size": 1},
      "compile": {"deepcompile": false}, "sequence_parallel_size": 1,
      "gradient_allreduce_op": "Mean", "dataloader_drop_last": true,
      "zero_optimization": {"stage": 3, "zenflow": null,
          "stage3_allgather_sequential": false, "leaf_module": {},
          "stage3_module_granularity_threshold": 0,
          "allgather_sequential": false, "zeropp_loco_param": null}})",
                                1, &warnings);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(absl::StrJoin(warnings, "\n"), Not(HasSubstr("unknown key")));
  EXPECT_THAT(warnings,
              testing::Contains("bf16.bf16_master_weights_and_grads: not used "
                                "by zeroshard (master weights are fp32 on the "
                                "servers); ignored"));
  EXPECT_THAT(warnings,
              testing::Contains("tensor_parallel: not used by zeroshard (no "
                                "tensor parallelism: data parallel only); "
                                "ignored"));

  c = ParseDeepSpeedConfig(R"({"train_micro_batch_size_per_gpu": 1,
      "torch_autocast": {"enabled": true, "dtype": "torch.bfloat16",
                         "lower_precision_safe_modules": ["torch.nn.Linear"]}})",
                           1, &warnings);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->torch_autocast);
  c = ParseDeepSpeedConfig(R"({"train_micro_batch_size_per_gpu": 1,
      "torch_autocast": {"enabled": true, "dtype": "float16"}})",
                           1, nullptr);
  EXPECT_THAT(c.status().message(),
              HasSubstr("torch_autocast.dtype: \"float16\" needs torch's "
                        "GradScaler"));
  c = ParseDeepSpeedConfig(R"({"train_micro_batch_size_per_gpu": 1,
      "bf16": {"enabled": true}, "torch_autocast": {"enabled": true}})",
                           1, nullptr);
  EXPECT_THAT(c.status().message(),
              HasSubstr("torch_autocast.enabled: true with the fp16 or bf16 "
                        "section enabled: choose one"));
  c = ParseDeepSpeedConfig(R"({"train_micro_batch_size_per_gpu": 1,
      "gradient_allreduce_op": "sum"})",
                           1, nullptr);
  EXPECT_EQ(c.status().message(),
            "gradient_allreduce_op: only \"mean\" (DeepSpeed's default): the "
            "workers average the gradients, got \"sum\"");
  c = ParseDeepSpeedConfig(R"({"train_micro_batch_size_per_gpu": 1,
      "dataloader_drop_last": "yes"})",
                           1, nullptr);
  EXPECT_THAT(c.status().message(),
              HasSubstr("dataloader_drop_last: must be true or false"));
}

// An NVMe offload_param's unused keys are warned once each (they are in
// both the NVMe list and offload_param's).
TEST(DsConfigTest, NvmeOffloadParamWarnsOnce) {
  std::vector<std::string> warnings;
  auto c = ParseDeepSpeedConfig(
      R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
          "offload_param": {"device": "nvme", "nvme_path": "/tmp/nv",
                            "pin_memory": true, "buffer_count": 5}}})",
      1, &warnings);
  ASSERT_TRUE(c.ok()) << c.status();
  for (const char* key : {"pin_memory", "buffer_count"}) {
    const std::string path = std::string("zero_optimization.offload_param.") +
                             key + ": not used by zeroshard";
    int n = 0;
    for (const std::string& w : warnings) n += absl::StrContains(w, path);
    EXPECT_EQ(n, 1) << key;
  }
}

TEST(DsConfigTest, AutoIsFilledOrNamed) {
  std::vector<std::string> warnings;
  auto c = ParseDeepSpeedConfigFile(TestData("hf_auto.json"), 2, &warnings);
  ASSERT_FALSE(c.ok());
  // Every "auto" that nothing fills, in one error (reading order), and no
  // warning from reading on past them.
  EXPECT_EQ(c.status().message(),
            TestData("hf_auto.json") +
                ": \"auto\" with nothing to fill it, in 3 keys: "
                "optimizer.params.lr: give --learning_rate; bf16.enabled: "
                "give --precision=fp32, fp16 or bf16; "
                "zero_optimization.reduce_bucket_size (it is hidden^2 of the "
                "model's hidden size, which is not known here): give the "
                "model: zeroshard train's --channels or --model_file, the C "
                "API's and zeroshard.Config's hidden_size");
  EXPECT_THAT(warnings, IsEmpty());
  AutoInputs in;
  in.learning_rate = 2e-4;
  in.precision = "bf16";
  in.hidden_size = 16;
  c = ParseDeepSpeedConfigFile(TestData("hf_auto.json"), 2, in, &warnings);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(warnings, IsEmpty());
  EXPECT_EQ(c->batch.train_batch_size, 16);  // derived: 4 * 2 * 2
  EXPECT_EQ(c->gradient_clipping, 1.0);      // Hugging Face's max_grad_norm
  EXPECT_EQ(c->optimizer.lr, 2e-4);
  EXPECT_EQ(c->optimizer.beta2, 0.999);
  EXPECT_EQ(c->precision, engine::Precision::kBf16);
  EXPECT_EQ(c->zero.reduce_bucket_size, 256);  // 16^2
  EXPECT_THAT(
      c->auto_keys,
      UnorderedElementsAre(
          "train_batch_size", "gradient_clipping", "optimizer.params.lr",
          "optimizer.params.betas", "optimizer.params.eps",
          "optimizer.params.weight_decay", "bf16.enabled",
          "zero_optimization.reduce_bucket_size", "zeroshard.servers"));
  EXPECT_EQ(c->zeroshard.num_servers, 0);
}

TEST(DsConfigTest, AcceptsIntegralFloatsAndAdamWithoutWeightDecay) {
  auto c = ParseDeepSpeedConfig(R"({
      "train_batch_size": 8.0,
      "optimizer": {"type": "adam", "params": {"adam_w_mode": false}},
      "zero_optimization": {"stage": 2.0, "reduce_bucket_size": 1e15}})",
                                1, nullptr);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->batch.train_batch_size, 8);
  EXPECT_EQ(c->zero.stage, 2);
  EXPECT_EQ(c->zero.reduce_bucket_size, int64_t{1000000000000000});
}

}  // namespace
// What DeepSpeed reads from older or partial configs (DeepSpeedExamples,
// DeepSpeed-Chat): the legacy "zero_optimization": true (stage 1) and
// cpu_offload_param, torch_adam's weight decay default (torch's AdamW:
// 0.01), no optimizer section with --learning_rate (Hugging Face's AdamW
// from its arguments), and an "auto" warmup_max_lr filled by a flag that
// disagrees with the file's lr.
TEST(DsConfigTest, WhatDeepSpeedReadsOfOlderAndPartialConfigs) {
  std::vector<std::string> warnings;
  auto c = ParseDeepSpeedConfig(
      R"({"train_batch_size": 8, "optimizer": {"type": "AdamW"},
          "zero_optimization": true})",
      1, &warnings);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->zero.stage, 1);
  EXPECT_THAT(absl::StrJoin(warnings, "\n"),
              HasSubstr("legacy form of {\"stage\": 1}"));

  warnings.clear();
  c = ParseDeepSpeedConfig(
      R"({"train_batch_size": 8, "optimizer": {"type": "AdamW"},
          "zero_optimization": {"stage": 3, "cpu_offload_param": true}})",
      1, &warnings);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->zero.offload_param, OffloadDevice::kServer);

  c = ParseDeepSpeedConfig(
      R"({"train_batch_size": 8,
          "optimizer": {"type": "AdamW", "params": {"torch_adam": true}}})",
      1, nullptr);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->optimizer.weight_decay, 0.01);
  c = ParseDeepSpeedConfig(
      R"({"train_batch_size": 8, "optimizer": {"type": "AdamW"}})", 1, nullptr);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->optimizer.weight_decay, 0.0);  // FusedAdam's default

  AutoInputs in;
  in.learning_rate = 1e-4;
  in.weight_decay = 0.05;
  warnings.clear();
  c = ParseDeepSpeedConfig(R"({"train_batch_size": 8})", 1, in, &warnings);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->optimizer.lr, 1e-4);
  EXPECT_EQ(c->optimizer.weight_decay, 0.05);
  EXPECT_THAT(absl::StrJoin(warnings, "\n"),
              HasSubstr("AdamW with lr 0.0001 (--learning_rate)"));

  warnings.clear();
  c = ParseDeepSpeedConfig(
      R"({"train_batch_size": 8, "optimizer": {"params": {"lr": 1e-3}},
          "scheduler": {"type": "WarmupLR",
                        "params": {"warmup_max_lr": "auto"}}})",
      1, in, &warnings);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->lr_schedule.warmup_max_lr, 1e-4);
  EXPECT_THAT(absl::StrJoin(warnings, "\n"),
              HasSubstr("the schedule peaks at 0.0001"));
  EXPECT_THAT(DescribeEngineConfig(*c), HasSubstr("WarmupLR 0 to 0.0001"));

  // "auto" train_batch_size from the flags, as Hugging Face fills it: a
  // file without an accumulation key derives it from that.
  AutoInputs hf;
  hf.per_device_train_batch_size = 4;
  hf.gradient_accumulation_steps = 2;
  warnings.clear();
  c = ParseDeepSpeedConfig(
      R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": 4,
          "optimizer": {"type": "AdamW"}})",
      2, hf, &warnings);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->batch.train_batch_size, 16);
  EXPECT_EQ(c->batch.gradient_accumulation_steps, 2);
  EXPECT_THAT(absl::StrJoin(warnings, "\n"), Not(HasSubstr("not used")));

  // A section without a type is no optimizer to DeepSpeed: said, and the
  // schedule's own range named (it trains at that, not at the lr).
  warnings.clear();
  c = ParseDeepSpeedConfig(
      R"({"train_batch_size": 8, "optimizer": {"params": {"lr": 5e-5}},
          "scheduler": {"type": "WarmupLR"}})",
      1, &warnings);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(absl::StrJoin(warnings, "\n"),
              HasSubstr("AdamW with lr 5e-05, betas"));
  EXPECT_THAT(absl::StrJoin(warnings, "\n"),
              HasSubstr("the rate follows the scheduler's WarmupLR from 0 to "
                        "0.001"));
}

}  // namespace zeroshard::config
