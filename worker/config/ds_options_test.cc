// ds_options.h: a DeepSpeed JSON config onto ZeroOptions — round trips of
// the tests' specs, the prefetch mapping, and the clear errors for what the
// engine does not implement.
#include "worker/config/ds_options.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/config/ds_config.h"
#include "worker/engine/optimizer.h"
#include "worker/engine/testing.h"
#include "worker/gpt2/engine_model.h"

namespace zeroshard::config {
namespace {

absl::StatusOr<engine::ZeroOptions> FromJson(
    const std::string& json, int world, std::vector<std::string>* warnings) {
  auto config = config::ParseDeepSpeedConfig(json, world, warnings);
  if (!config.ok()) return config.status();
  auto layout = gpt2::EngineLayout(engine::TinyConfig());
  if (!layout.ok()) return layout.status();
  return ZeroOptionsFromConfig(*config, *layout, 16, warnings);
}

bool PersistenceWarned(const std::vector<std::string>& warnings) {
  for (const std::string& w : warnings) {
    if (absl::StrContains(w, "stage3_param_persistence_threshold")) {
      return true;
    }
  }
  return false;
}

TEST(DsOptionsTest, TheTestSpecsRoundTrip) {
  for (int stage : {0, 1, 2, 3}) {
    for (bool offload : {false, true}) {
      if (offload && stage != 3) continue;
      for (int prefetch : {0, 1, 3}) {
        train::TrainSpec spec =
            engine::TinySpec(stage, offload, "ds_options_test");
        spec.zero.overlap_comm = prefetch != 3;
        spec.zero.stage3_prefetch_units = prefetch;
        spec.zero.stage3_param_persistence_threshold = 1000u * prefetch;
        spec.zero.stage3_max_reuse_distance = 5000u * prefetch;
        spec.zero.stage3_max_live_parameters = 3000u * prefetch;
        spec.zero.allgather_bucket_size = 7000u * prefetch;
        // fp32, then fp16 with a dynamic scaler, then bf16.
        spec.zero.precision = static_cast<engine::Precision>(prefetch % 3);
        spec.zero.loss_scaler.dynamic = prefetch == 1;
        spec.zero.loss_scaler.initial_scale = 1 << 12;
        spec.zero.loss_scaler.scale_window = 7;
        spec.zero.loss_scaler.hysteresis = 3;
        spec.zero.loss_scaler.min_scale = 0.5;
        SCOPED_TRACE(engine::DeepSpeedJson(spec, 64));
        std::vector<std::string> warnings;
        auto got = FromJson(engine::DeepSpeedJson(spec, 64), 2, &warnings);
        ASSERT_TRUE(got.ok()) << got.status();
        const engine::ZeroOptions& want = spec.zero;
        EXPECT_EQ(got->stage, want.stage);
        EXPECT_EQ(got->micro_batch, want.micro_batch);
        EXPECT_EQ(got->seq_len, want.seq_len);
        EXPECT_EQ(got->gradient_accumulation_steps,
                  want.gradient_accumulation_steps);
        EXPECT_EQ(got->gradient_clipping, want.gradient_clipping);
        EXPECT_EQ(got->lr_schedule.type, engine::LrScheduleType::kConstant);
        EXPECT_EQ(got->lr_schedule.lr, want.lr_schedule.lr);
        EXPECT_EQ(got->beta1, want.beta1);
        EXPECT_EQ(got->beta2, want.beta2);
        EXPECT_EQ(got->eps, want.eps);
        EXPECT_EQ(got->weight_decay, want.weight_decay);
        EXPECT_EQ(got->reduce_bucket_size, want.reduce_bucket_size);
        EXPECT_EQ(got->allgather_bucket_size, want.allgather_bucket_size);
        EXPECT_EQ(got->stage3_prefetch_units, want.stage3_prefetch_units);
        EXPECT_EQ(got->offload_param_server, want.offload_param_server);
        EXPECT_EQ(got->overlap_comm, want.overlap_comm);
        EXPECT_EQ(got->stage3_param_persistence_threshold,
                  want.stage3_param_persistence_threshold);
        EXPECT_EQ(got->stage3_max_reuse_distance,
                  want.stage3_max_reuse_distance);
        EXPECT_EQ(got->stage3_max_live_parameters,
                  want.stage3_max_live_parameters);
        EXPECT_EQ(got->precision, want.precision);
        if (want.precision == engine::Precision::kFp16) {
          const engine::LossScalerOptions& a = got->loss_scaler;
          const engine::LossScalerOptions& b = want.loss_scaler;
          EXPECT_EQ(a.dynamic, b.dynamic);
          EXPECT_EQ(a.initial_scale, b.initial_scale);
          EXPECT_EQ(a.scale_window, b.scale_window);
          // Stage 0: DeepSpeed's FP16_Optimizer has no hysteresis.
          EXPECT_EQ(a.hysteresis, want.stage == 0 ? 1 : b.hysteresis);
          EXPECT_EQ(a.min_scale, b.min_scale);
        }
        for (const std::string& w : warnings) std::printf("%s\n", w.c_str());
      }
    }
  }
}

TEST(DsOptionsTest, SchedulerBatchAndPrefetch) {
  std::vector<std::string> warnings;
  auto got =
      FromJson(R"({"train_batch_size": 16, "gradient_accumulation_steps": 2,
      "optimizer": {"type": "Adam", "params": {"lr": 6e-4}},
      "scheduler": {"type": "WarmupCosineLR",
                    "params": {"total_num_steps": 100, "warmup_num_steps": 5}},
      "zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 2e7}})",
               4, &warnings);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->micro_batch, 2);  // 16 / (2 * 4)
  EXPECT_EQ(got->gradient_accumulation_steps, 2);
  EXPECT_EQ(got->lr_schedule.type, engine::LrScheduleType::kWarmupCosineLR);
  EXPECT_EQ(got->lr_schedule.lr, 6e-4);
  EXPECT_EQ(got->lr_schedule.total_num_steps, 100);
  EXPECT_TRUE(got->overlap_comm);            // DeepSpeed's default for stage 3
  EXPECT_EQ(got->stage3_prefetch_units, 4);  // every unit (L + 2) at most
  // DeepSpeed's default, 1e5, exceeds every unit of the tiny model.
  EXPECT_EQ(got->stage3_param_persistence_threshold, 100000u);
  EXPECT_EQ(got->stage3_max_reuse_distance, 1000000000u);   // DeepSpeed's
  EXPECT_EQ(got->stage3_max_live_parameters, 1000000000u);  // DeepSpeed's
  EXPECT_TRUE(PersistenceWarned(warnings));

  // Smaller than one unit still prefetches one; 0 prefetches none.
  got = FromJson(R"({"train_micro_batch_size_per_gpu": 1,
      "zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 10}})",
                 1, nullptr);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->stage3_prefetch_units, 1);
  got = FromJson(R"({"train_micro_batch_size_per_gpu": 1,
      "zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 0}})",
                 1, nullptr);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->stage3_prefetch_units, 0);
}

TEST(DsOptionsTest, MixedPrecisionAndTheLossScaler) {
  auto fp16 = FromJson(R"({"train_micro_batch_size_per_gpu": 1,
      "fp16": {"enabled": true, "initial_scale_power": 12,
               "loss_scale_window": 50, "hysteresis": 3,
               "min_loss_scale": 0.25}, "zero_optimization": {"stage": 2}})",
                       1, nullptr);
  ASSERT_TRUE(fp16.ok()) << fp16.status();
  EXPECT_EQ(fp16->precision, engine::Precision::kFp16);
  EXPECT_TRUE(fp16->loss_scaler.dynamic);
  EXPECT_EQ(fp16->loss_scaler.initial_scale, 4096.0);
  EXPECT_EQ(fp16->loss_scaler.scale_window, 50);
  EXPECT_EQ(fp16->loss_scaler.hysteresis, 3);
  EXPECT_EQ(fp16->loss_scaler.min_scale, 0.25);

  auto fixed = FromJson(R"({"train_micro_batch_size_per_gpu": 1,
      "fp16": {"enabled": true, "loss_scale": 128}})",
                        1, nullptr);
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  EXPECT_FALSE(fixed->loss_scaler.dynamic);
  EXPECT_EQ(fixed->loss_scaler.static_scale, 128.0);

  auto bf16 = FromJson(R"({"train_micro_batch_size_per_gpu": 1,
      "bf16": {"enabled": true}})",
                       1, nullptr);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_EQ(bf16->precision, engine::Precision::kBf16);

  auto bad = FromJson(R"({"train_micro_batch_size_per_gpu": 1,
      "fp16": {"enabled": true, "hysteresis": 0}})",
                      1, nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "hysteresis"))
      << bad.status();
}

// TinyConfig's units: embeddings 2560 elements, blocks 12704, final norm 64.
TEST(DsOptionsTest, PersistenceThreshold) {
  auto json = [](int stage, const char* threshold) {
    return absl::StrCat(R"({"train_micro_batch_size_per_gpu": 1,
        "zero_optimization": {"stage": )",
                        stage, R"(, "stage3_param_persistence_threshold": )",
                        threshold, "}}");
  };
  struct Case {
    int stage;
    const char* threshold;
    uint64_t want;
    bool warned;  // every unit persistent
  };
  for (const Case& c :
       {Case{3, "0", 0, false}, Case{3, "3000", 3000, false},
        Case{3, "12704", 12704, true}, Case{2, "1e5", 100000, false}}) {
    SCOPED_TRACE(c.threshold);
    std::vector<std::string> warnings;
    auto got = FromJson(json(c.stage, c.threshold), 1, &warnings);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->stage3_param_persistence_threshold, c.want);
    EXPECT_EQ(PersistenceWarned(warnings), c.warned);
  }
  // Rejected by the parser.
  auto negative = FromJson(json(3, "-1"), 1, nullptr);
  ASSERT_FALSE(negative.ok());
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(negative.status().message(),
                                "stage3_param_persistence_threshold"))
      << negative.status();
}

TEST(DsOptionsTest, BiasCorrectionReachesTheServersSpec) {
  // DeepSpeedExamples' BingBertSquad config: Adam without bias correction.
  auto off = FromJson(R"({"train_batch_size": 24,
                          "train_micro_batch_size_per_gpu": 3,
                          "optimizer": {"type": "Adam", "params": {
                            "lr": 3e-5, "weight_decay": 0.0,
                            "bias_correction": false}},
                          "gradient_clipping": 1.0})",
                      8, nullptr);
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->bias_correction);
  auto on = FromJson(R"({"train_micro_batch_size_per_gpu": 1})", 1, nullptr);
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_TRUE(on->bias_correction);
  auto layout = gpt2::EngineLayout(engine::TinyConfig());
  ASSERT_TRUE(layout.ok()) << layout.status();
  for (const auto& [options, want] :
       {std::pair(*off, true), std::pair(*on, false)}) {
    const v1::ModelSpec spec = engine::ZeroModelSpec(*layout, options, 2, 64);
    ASSERT_GT(spec.param_groups_size(), 0);
    for (const v1::ParamGroup& g : spec.param_groups()) {
      EXPECT_EQ(g.no_bias_correction(), want);
    }
  }
}

TEST(DsOptionsTest, ServerAggregationIsMapped) {
  auto got = FromJson(R"({"train_micro_batch_size_per_gpu": 1,
                          "zero_optimization": {"stage": 2},
                          "zeroshard": {"server_aggregation": true}})",
                      1, nullptr);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->server_aggregation);
  auto off = FromJson(R"({"train_micro_batch_size_per_gpu": 1})", 1, nullptr);
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->server_aggregation);
}

TEST(DsOptionsTest, DelayedUpdateIsMappedOrRefusedByName) {
  auto got = FromJson(R"({"train_micro_batch_size_per_gpu": 1,
                          "zero_optimization": {"stage": 2},
                          "zeroshard": {"delayed_parameter_update": true,
                                        "delayed_update_warmup_steps": 5}})",
                      1, nullptr);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->delayed_update_from, 5);
  auto fallback = FromJson(R"({"train_micro_batch_size_per_gpu": 1,
                               "zero_optimization": {"stage": 1},
                               "zeroshard": {"delayed_parameter_update": true}})",
                           1, nullptr);
  ASSERT_TRUE(fallback.ok()) << fallback.status();
  EXPECT_EQ(fallback->delayed_update_from, 40);  // the default warm-up
  auto off = FromJson(R"({"train_micro_batch_size_per_gpu": 1,
                          "zero_optimization": {"stage": 2},
                          "zeroshard": {"delayed_update_warmup_steps": 5}})",
                      1, nullptr);
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->delayed_update_from, 0);
  const struct {
    const char* json;
    const char* words;
  } bad[] = {
      {R"({"zero_optimization": {"stage": 3},
           "zeroshard": {"delayed_parameter_update": true}})",
       "needs zero_optimization.stage 1 or 2 (stage 3"},
      {R"({"zero_optimization": {"stage": 0},
           "zeroshard": {"delayed_parameter_update": true}})",
       "needs zero_optimization.stage 1 or 2 (stage 0"},
      {R"({"zero_optimization": {"stage": 2},
           "zeroshard": {"delayed_parameter_update": true,
                         "checkpoint_interval": 10}})",
       "cannot be used with zeroshard.checkpoint_interval"},
      {R"({"zero_optimization": {"stage": 2},
           "zeroshard": {"delayed_parameter_update": true,
                         "server_aggregation": true}})",
       "cannot be used with zeroshard.server_aggregation"},
      {R"({"zero_optimization": {"stage": 2},
           "zeroshard": {"delayed_parameter_update": true,
                         "delayed_update_warmup_steps": 0}})",
       "zeroshard.delayed_update_warmup_steps"},
  };
  for (const auto& b : bad) {
    SCOPED_TRACE(b.json);
    auto s = FromJson(
        std::string(R"({"train_micro_batch_size_per_gpu": 1, )") + (b.json + 1),
        1, nullptr);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(s.status().message(), b.words)) << s.status();
  }
}

// torch_autocast is for a torch module's forward: the C++ trainer's GPT-2
// refuses it by name.
TEST(DsOptionsTest, TorchAutocastIsRefusedByName) {
  auto got = FromJson(R"({"train_micro_batch_size_per_gpu": 1,
                          "torch_autocast": {"enabled": true}})",
                      1, nullptr);
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(absl::StrContains(got.status().message(),
                                "torch_autocast.enabled: for a torch module"))
      << got.status();
}

}  // namespace
}  // namespace zeroshard::config
