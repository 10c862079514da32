// The C API's configuration functions (config_api.h) against the C++ they
// wrap: the same config, message and warnings as ParseDeepSpeedConfig, the
// same rates as LearningRate, the same scaler states as LossScaler, and
// every bad argument rejected with nothing changed.
#include "worker/config/config_api.h"

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/capi/handles.h"
#include "client/zeroshard.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/config/ds_config.h"
#include "worker/engine/loss_scaler.h"
#include "worker/engine/lr_schedule.h"
#include "worker/engine/scaler_record.h"

namespace zeroshard::config {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// zs_last_error() is client/capi's (not linked here); it returns this.
const char* LastError() { return capi::LastError(); }

// Bazel runs tests from the runfiles workspace root.
std::string TestData(const std::string& name) {
  return "worker/config/testdata/" + name;
}

// hf_auto.json needs inputs for its "auto" values: ResolveFillsAutos.
const char* const kFiles[] = {"ds_config_zero2_fp16.json",
                              "ds_config_zero3.json", "invalid_syntax.json",
                              "minimal.json"};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Inline configs: errors, warnings and each schedule.
const char* const kInline[] = {
    R"({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 2})",
    R"({"train_batch_size": 7})",
    R"({"gradient_accumulation_steps": 2})",
    R"({"train_batch_size": 8, "optimizer": {"type": "SGD"}})",
    R"({"train_batch_size": 8, "fp16": {"enabled": true},
        "bf16": {"enabled": true}})",
    "{",
    "[1, 2]",
    "",
    R"({"train_batch_size": 8, "foo": 1, "steps_per_print": 5,
        "zero_optimization": {"stage": 3, "bar": true,
                              "offload_param": {"device": "cpu"}}})",
    R"({"train_batch_size": 16, "optimizer": {"type": "adam",
        "params": {"lr": 0.01, "betas": [0.8, 0.99]}},
        "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 1e-5,
        "warmup_max_lr": 0.02, "warmup_num_steps": 30}}})",
    R"({"train_batch_size": 16, "gradient_clipping": 2.5,
        "scheduler": {"type": "WarmupCosineLR", "params": {
        "total_num_steps": 80, "warmup_num_steps": 1,
        "warmup_min_ratio": 0.1, "cos_min_ratio": 0.05}}})",
    R"({"train_batch_size": 16, "scheduler": {"type": "WarmupDecayLR",
        "params": {"total_num_steps": 10, "warmup_num_steps": 20,
                   "warmup_type": "linear"}}})",
    R"({"train_batch_size": 16, "fp16": {"enabled": true, "loss_scale": 128}})",
    R"({"train_batch_size": 8, "zeroshard": {"servers": ["a,b:1"]}})",
    R"({"train_batch_size": 8, "zeroshard": {"servers": 3,
        "server_aggregation": true, "alignment": 128,
        "checkpoint_interval": 25}})",
    R"({"train_batch_size": 8, "zero_optimization": {"stage": 2},
        "zeroshard": {"delayed_parameter_update": true,
                      "delayed_update_warmup_steps": 7}})",
    R"({"train_batch_size": 8, "optimizer": {"type": "Adam",
        "params": {"lr": 3e-5, "bias_correction": false}}})",
};

// Every field but auto_keys (the struct does not carry it).
void ExpectSame(const EngineConfig& a, const EngineConfig& b) {
#define SAME(f) EXPECT_EQ(a.f, b.f) << #f
  SAME(batch.train_batch_size);
  SAME(batch.micro_batch_per_worker);
  SAME(batch.gradient_accumulation_steps);
  SAME(batch.world_size);
  SAME(gradient_clipping);
  SAME(optimizer.type);
  SAME(optimizer.lr);
  SAME(optimizer.beta1);
  SAME(optimizer.beta2);
  SAME(optimizer.eps);
  SAME(optimizer.weight_decay);
  SAME(optimizer.bias_correction);
  SAME(lr_schedule.type);
  SAME(lr_schedule.lr);
  SAME(lr_schedule.warmup_min_lr);
  SAME(lr_schedule.warmup_max_lr);
  SAME(lr_schedule.warmup_num_steps);
  SAME(lr_schedule.warmup_type);
  SAME(lr_schedule.total_num_steps);
  SAME(lr_schedule.warmup_min_ratio);
  SAME(lr_schedule.cos_min_ratio);
  SAME(precision);
  SAME(loss_scaler.dynamic);
  SAME(loss_scaler.static_scale);
  SAME(loss_scaler.initial_scale);
  SAME(loss_scaler.scale_window);
  SAME(loss_scaler.hysteresis);
  SAME(loss_scaler.consecutive_hysteresis);
  SAME(loss_scaler.min_scale);
  SAME(loss_scaler.scale_factor);
  SAME(loss_scaler.raise_error_at_min_scale);
  SAME(zero.stage);
  SAME(zero.overlap_comm);
  SAME(zero.contiguous_gradients);
  SAME(zero.reduce_scatter);
  SAME(zero.reduce_bucket_size);
  SAME(zero.allgather_bucket_size);
  SAME(zero.stage3_prefetch_bucket_size);
  SAME(zero.stage3_max_live_parameters);
  SAME(zero.stage3_max_reuse_distance);
  SAME(zero.stage3_param_persistence_threshold);
  SAME(zero.sub_group_size);
  SAME(zero.offload_param);
  SAME(zeroshard.server_addresses);
  SAME(zeroshard.num_servers);
  SAME(zeroshard.server_aggregation);
  SAME(zeroshard.alignment);
  SAME(zeroshard.checkpoint_interval);
  SAME(zeroshard.delayed_parameter_update);
  SAME(zeroshard.delayed_update_warmup_steps);
#undef SAME
}

std::string Joined(const std::vector<std::string>& warnings) {
  std::string s;
  for (const std::string& w : warnings) absl::StrAppend(&s, w, "\n");
  return s;
}

zs_train_config Garbage() {
  zs_train_config c;
  std::memset(&c, 0xAB, sizeof(c));
  return c;
}

bool SameBytes(const zs_train_config& a, const zs_train_config& b) {
  return std::memcmp(&a, &b, sizeof(a)) == 0;
}

// zs_config_parse[_file] (`file`: of a path) against the C++ parser.
void ExpectParsedAlike(const std::string& input, bool file, int world_size) {
  SCOPED_TRACE(absl::StrCat(file ? "file " : "text ", input, ", world size ",
                            world_size));
  std::vector<std::string> want_warnings;
  const absl::StatusOr<EngineConfig> want =
      file ? ParseDeepSpeedConfigFile(input, world_size, &want_warnings)
           : ParseDeepSpeedConfig(input, world_size, &want_warnings);
  zs_train_config got = Garbage();
  char warnings[4096];
  size_t length = 12345;
  const int rc = file
                     ? zs_config_parse_file(input.c_str(), world_size, &got,
                                            warnings, sizeof(warnings), &length)
                     : zs_config_parse(input.c_str(), world_size, &got,
                                       warnings, sizeof(warnings), &length);
  EXPECT_EQ(warnings, Joined(want_warnings));
  EXPECT_EQ(length, Joined(want_warnings).size());
  absl::StatusOr<zs_train_config> want_c =
      want.ok() ? ToTrainConfig(*want) : want.status();
  ASSERT_EQ(rc, static_cast<int>(want_c.status().code()));
  if (!want_c.ok()) {
    EXPECT_EQ(
        std::string(LastError()),
        absl::StrCat(file ? "zs_config_parse_file: " : "zs_config_parse: ",
                     want_c.status().message()));
    EXPECT_TRUE(SameBytes(got, Garbage())) << "out written on error";
    return;
  }
  EXPECT_STREQ(LastError(), "");
  EXPECT_TRUE(SameBytes(got, *want_c));
  // The one pair of conversions round-trips, both ways.
  absl::StatusOr<EngineConfig> back = FromTrainConfig(got);
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSame(*back, *want);
  absl::StatusOr<zs_train_config> again = ToTrainConfig(*back);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(SameBytes(*again, got));
  // The description is the engine's.
  const std::string line = DescribeEngineConfig(*want);
  char buf[512];
  EXPECT_EQ(zs_config_describe(&got, buf, sizeof(buf)), line.size());
  EXPECT_EQ(std::string(buf), line);
}

TEST(ConfigApiTest, ParsesLikeTheEngine) {
  for (int world_size : {1, 2, 4}) {
    for (const char* name : kFiles) {
      ExpectParsedAlike(TestData(name), /*file=*/true, world_size);
      ExpectParsedAlike(ReadFile(TestData(name)), /*file=*/false, world_size);
    }
    for (const char* json : kInline) {
      ExpectParsedAlike(json, /*file=*/false, world_size);
    }
  }
  ExpectParsedAlike(TestData("no_such_file.json"), /*file=*/true, 1);
}

TEST(ConfigApiTest, ParseReportsWhatTheStructCannotHold) {
  zs_train_config c = Garbage();
  EXPECT_EQ(zs_config_parse(kInline[13], 1, &c, nullptr, 0, nullptr),
            ZS_INVALID_ARGUMENT);
  EXPECT_THAT(LastError(), HasSubstr("holds a ','"));
  std::string servers;
  for (int i = 0; i < 300; ++i) {
    absl::StrAppend(&servers, i ? ", " : "", "\"server-", i, ".example:7000\"");
  }
  const std::string json = absl::StrCat(
      R"({"train_batch_size": 8, "zeroshard": {"servers": [)", servers, "]}}");
  EXPECT_EQ(zs_config_parse(json.c_str(), 1, &c, nullptr, 0, nullptr),
            ZS_INVALID_ARGUMENT);
  EXPECT_THAT(LastError(), HasSubstr("over the 4095"));
  EXPECT_TRUE(SameBytes(c, Garbage()));
}

TEST(ConfigApiTest, WarningsAreCutToTheBuffer) {
  zs_train_config c;
  char small[10];
  size_t length = 0;
  ASSERT_EQ(zs_config_parse(kInline[8], 1, &c, small, sizeof(small), &length),
            ZS_OK);
  std::vector<std::string> want;
  ASSERT_TRUE(ParseDeepSpeedConfig(kInline[8], 1, &want).ok());
  ASSERT_GE(want.size(), 4u);
  EXPECT_EQ(length, Joined(want).size());
  EXPECT_EQ(std::string(small), Joined(want).substr(0, 9));
  // No buffer and no length: fine.
  EXPECT_EQ(zs_config_parse(kInline[8], 1, &c, nullptr, 0, nullptr), ZS_OK);
}

zs_train_config Parsed(const std::string& json, int world_size = 1) {
  zs_train_config c = Garbage();
  EXPECT_EQ(zs_config_parse(json.c_str(), world_size, &c, nullptr, 0, nullptr),
            ZS_OK)
      << LastError();
  return c;
}

TEST(ConfigApiTest, LearningRatesAreTheSchedules) {
  std::vector<std::string> configs;
  for (const char* name : kFiles) {
    if (std::string(name) != "invalid_syntax.json") {
      configs.push_back(ReadFile(TestData(name)));
    }
  }
  configs.push_back(kInline[9]);   // WarmupLR, log warmup
  configs.push_back(kInline[10]);  // WarmupCosineLR, log, warmup < 2
  configs.push_back(kInline[11]);  // WarmupDecayLR, total < warmup
  for (const std::string& json : configs) {
    SCOPED_TRACE(json);
    const zs_train_config c = Parsed(json, /*world_size=*/2);
    const absl::StatusOr<EngineConfig> e =
        ParseDeepSpeedConfig(json, 2, nullptr);
    ASSERT_TRUE(e.ok());
    double none = -1;
    EXPECT_EQ(zs_config_lr(&c, -1, &none), ZS_INVALID_ARGUMENT);
    EXPECT_EQ(none, -1);
    for (int64_t step = 0; step < 1200; ++step) {
      double lr = -1;
      ASSERT_EQ(zs_config_lr(&c, step, &lr), ZS_OK) << LastError();
      ASSERT_EQ(lr, engine::UpdateLearningRate(e->lr_schedule, step))
          << "step " << step;
    }
  }
  // Every schedule type was covered.
  std::vector<int> types;
  for (const std::string& json : configs) {
    types.push_back(Parsed(json, 2).lr_schedule);
  }
  EXPECT_THAT(types, ::testing::IsSupersetOf({ZS_LR_CONSTANT, ZS_LR_WARMUP,
                                              ZS_LR_WARMUP_DECAY,
                                              ZS_LR_WARMUP_COSINE}));
}

// A trainer state whose other fields must survive the scaler's calls.
zs_trainer_state Marked() {
  zs_trainer_state s;
  std::memset(&s, 0, sizeof(s));
  s.step = 11, s.updates = 7, s.data_epoch = 3, s.seed = 99;
  return s;
}

void ExpectOthersKept(const zs_trainer_state& s) {
  EXPECT_EQ(s.step, 11u);
  EXPECT_EQ(s.updates, 7u);
  EXPECT_EQ(s.data_epoch, 3);
  EXPECT_EQ(s.seed, 99u);
}

engine::LossScalerState Of(const zs_trainer_state& s) {
  return {s.loss_scale, s.loss_scale_hysteresis, s.loss_scale_iteration,
          s.loss_scale_last_overflow};
}

// zs_loss_scaler_update over `overflows` equals the engine's scaler (and
// what the engine records) step by step, errors included; *errors counts
// the min-scale errors.
void ExpectScalesAlike(const std::string& json,
                       const std::vector<bool>& overflows, int* errors) {
  SCOPED_TRACE(json);
  const zs_train_config c = Parsed(json);
  const absl::StatusOr<EngineConfig> e = ParseDeepSpeedConfig(json, 1, nullptr);
  ASSERT_TRUE(e.ok());
  engine::LossScaler ref(
      engine::ScalerOptionsFor(e->precision, e->loss_scaler));
  zs_trainer_state s = Marked();
  ASSERT_EQ(zs_loss_scaler_init(&c, &s), ZS_OK) << LastError();
  engine::LossScalerState want = engine::RecordOf(ref);
  EXPECT_EQ(Of(s).scale, want.scale);
  EXPECT_EQ(Of(s).hysteresis_left, want.hysteresis_left);
  EXPECT_EQ(Of(s).iteration, want.iteration);
  EXPECT_EQ(Of(s).last_overflow_iteration, want.last_overflow_iteration);
  *errors = 0;
  for (size_t i = 0; i < overflows.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("update ", i, " overflow ", overflows[i]));
    const zs_trainer_state before = s;
    const absl::Status ref_status = ref.Update(overflows[i]);
    const int rc = zs_loss_scaler_update(&c, &s, overflows[i] ? 1 : 0);
    ASSERT_EQ(rc, static_cast<int>(ref_status.code())) << LastError();
    if (!ref_status.ok()) {
      ++*errors;
      EXPECT_EQ(rc, ZS_FAILED_PRECONDITION);
      EXPECT_EQ(std::string(LastError()),
                absl::StrCat("zs_loss_scaler_update: ", ref_status.message()));
      EXPECT_EQ(std::memcmp(&s, &before, sizeof(s)), 0);
      continue;
    }
    want = engine::RecordOf(ref);
    ASSERT_EQ(s.loss_scale, want.scale);
    ASSERT_EQ(s.loss_scale_hysteresis, want.hysteresis_left);
    ASSERT_EQ(s.loss_scale_iteration, want.iteration);
    ASSERT_EQ(s.loss_scale_last_overflow, want.last_overflow_iteration);
  }
  ExpectOthersKept(s);
}

// Overflows at steps where `pattern`'s character is '1'.
std::vector<bool> Steps(const std::string& pattern) {
  std::vector<bool> v;
  for (char ch : pattern) v.push_back(ch == '1');
  return v;
}

TEST(ConfigApiTest, LossScalerMovesAsTheEngines) {
  const std::string pattern =
      "0001000110000000100000011100000000000000001111000000010101010000";
  // Stage 1: DeepSpeed's hysteresis (stage 0's optimizer has none).
  const std::string fp16 =
      R"({"train_batch_size": 8, "zero_optimization": {"stage": 1},
          "fp16": {"enabled": true)";
  struct Case {
    std::string fp16_keys;
    bool errors;  // reaches the minimum scale with the hysteresis spent
  };
  const Case cases[] = {
      {"", false},
      {R"(, "loss_scale_window": 3, "hysteresis": 3, "initial_scale_power": 5)",
       false},
      {R"(, "loss_scale_window": 4, "consecutive_hysteresis": true)", false},
      {R"(, "loss_scale_window": 2, "hysteresis": 1)", false},
      {R"(, "hysteresis": 1, "initial_scale_power": 3, "min_loss_scale": 2)",
       true},
      {R"(, "loss_scale": 256)", false},
  };
  int errors = 0;
  for (const Case& c : cases) {
    ExpectScalesAlike(fp16 + c.fp16_keys + "}}", Steps(pattern), &errors);
    EXPECT_EQ(errors > 0, c.errors) << c.fp16_keys;
  }
  ExpectScalesAlike(R"({"train_batch_size": 8})", Steps(pattern), &errors);
  ExpectScalesAlike(R"({"train_batch_size": 8, "bf16": {"enabled": true}})",
                    Steps(pattern), &errors);
}

TEST(ConfigApiTest, LossScalerErrorsAtTheMinimumScale) {
  const zs_train_config c = Parsed(
      R"({"train_batch_size": 8, "fp16": {"enabled": true,
          "initial_scale_power": 1, "hysteresis": 1, "min_loss_scale": 1}})");
  zs_trainer_state s = Marked();
  ASSERT_EQ(zs_loss_scaler_init(&c, &s), ZS_OK);
  EXPECT_EQ(s.loss_scale, 2);
  EXPECT_EQ(s.loss_scale_hysteresis, 1);
  EXPECT_EQ(s.loss_scale_iteration, 0);
  EXPECT_EQ(s.loss_scale_last_overflow, -1);
  ASSERT_EQ(zs_loss_scaler_update(&c, &s, 1), ZS_OK);
  EXPECT_EQ(s.loss_scale, 1);
  const zs_trainer_state before = s;
  EXPECT_EQ(zs_loss_scaler_update(&c, &s, 1), ZS_FAILED_PRECONDITION);
  EXPECT_THAT(LastError(), HasSubstr("already at its minimum"));
  EXPECT_EQ(std::memcmp(&s, &before, sizeof(s)), 0);
}

TEST(ConfigApiTest, LossScalerRecordsWhatTheEngineRecords) {
  // fp32, bf16, static fp16: the scale and "not recorded" (hysteresis 0).
  for (const char* json :
       {R"({"train_batch_size": 8})",
        R"({"train_batch_size": 8, "bf16": {"enabled": true}})",
        R"({"train_batch_size": 8, "fp16": {"enabled": true,
            "loss_scale": 64}})"}) {
    SCOPED_TRACE(json);
    const zs_train_config c = Parsed(json);
    zs_trainer_state s = Marked();
    s.loss_scale = 5, s.loss_scale_hysteresis = 7;
    s.loss_scale_iteration = 9, s.loss_scale_last_overflow = 4;
    ASSERT_EQ(zs_loss_scaler_init(&c, &s), ZS_OK);
    const double scale = c.precision == ZS_PRECISION_FP16 ? 64 : 1;
    EXPECT_EQ(s.loss_scale, scale);
    EXPECT_EQ(s.loss_scale_hysteresis, 0);
    EXPECT_EQ(s.loss_scale_iteration, 0);
    EXPECT_EQ(s.loss_scale_last_overflow, 0);
    ASSERT_EQ(zs_loss_scaler_update(&c, &s, 1), ZS_OK);
    EXPECT_EQ(s.loss_scale, scale);
    EXPECT_EQ(s.loss_scale_hysteresis, 0);
    ExpectOthersKept(s);
  }
  // A dynamic scaler over a state that records none starts afresh, as the
  // engine does on resume.
  const zs_train_config c =
      Parsed(R"({"train_batch_size": 8, "fp16": {"enabled": true}})");
  zs_trainer_state s = Marked();
  s.loss_scale = 1;
  ASSERT_EQ(zs_loss_scaler_update(&c, &s, 0), ZS_OK);
  EXPECT_EQ(s.loss_scale, 65536);
  EXPECT_EQ(s.loss_scale_hysteresis, 1);  // stage 0: none
  EXPECT_EQ(s.loss_scale_iteration, 1);
  EXPECT_EQ(s.loss_scale_last_overflow, -1);
  // A state Restore rejects: INVALID_ARGUMENT, unchanged.
  for (auto spoil : std::vector<void (*)(zs_trainer_state*)>{
           [](zs_trainer_state* t) { t->loss_scale_hysteresis = 3; },
           [](zs_trainer_state* t) { t->loss_scale = -1; },
           [](zs_trainer_state* t) { t->loss_scale_iteration = -2; },
           [](zs_trainer_state* t) { t->loss_scale_last_overflow = 5; }}) {
    zs_trainer_state bad = s;
    spoil(&bad);
    const zs_trainer_state before = bad;
    EXPECT_EQ(zs_loss_scaler_update(&c, &bad, 1), ZS_INVALID_ARGUMENT);
    EXPECT_THAT(LastError(),
                StartsWith("zs_loss_scaler_update: loss scaler state"));
    EXPECT_EQ(std::memcmp(&bad, &before, sizeof(bad)), 0);
  }
}

TEST(ConfigApiTest, BadArgumentsChangeNothing) {
  const zs_train_config good =
      Parsed(ReadFile(TestData("ds_config_zero3.json")), 2);
  zs_train_config out = Garbage();
  char w[8] = "keep";
  size_t length = 77;
  EXPECT_EQ(zs_config_parse(nullptr, 1, &out, w, sizeof(w), &length),
            ZS_INVALID_ARGUMENT);
  EXPECT_STREQ(LastError(), "zs_config_parse: json is NULL");
  EXPECT_EQ(zs_config_parse("{}", 1, nullptr, w, sizeof(w), &length),
            ZS_INVALID_ARGUMENT);
  EXPECT_STREQ(LastError(), "zs_config_parse: out is NULL");
  EXPECT_EQ(zs_config_parse("{}", 0, &out, w, sizeof(w), &length),
            ZS_INVALID_ARGUMENT);
  EXPECT_STREQ(LastError(), "zs_config_parse: world_size must be >= 1, got 0");
  EXPECT_EQ(zs_config_parse("{}", 1, &out, nullptr, 5, &length),
            ZS_INVALID_ARGUMENT);
  EXPECT_THAT(LastError(), HasSubstr("warnings is NULL"));
  EXPECT_EQ(zs_config_parse_file(nullptr, 1, &out, w, sizeof(w), &length),
            ZS_INVALID_ARGUMENT);
  EXPECT_STREQ(LastError(), "zs_config_parse_file: path is NULL");
  EXPECT_EQ(zs_config_parse_file(TestData("minimal.json").c_str(), -3, &out, w,
                                 sizeof(w), &length),
            ZS_INVALID_ARGUMENT);
  EXPECT_TRUE(SameBytes(out, Garbage()));
  EXPECT_STREQ(w, "keep");
  EXPECT_EQ(length, 77u);

  double lr = 42;
  zs_trainer_state s = Marked();
  const zs_trainer_state marked = s;
  EXPECT_EQ(zs_config_lr(nullptr, 0, &lr), ZS_INVALID_ARGUMENT);
  EXPECT_STREQ(LastError(), "zs_config_lr: config is NULL");
  EXPECT_EQ(zs_config_lr(&good, 0, nullptr), ZS_INVALID_ARGUMENT);
  EXPECT_STREQ(LastError(), "zs_config_lr: lr is NULL");
  EXPECT_EQ(zs_loss_scaler_init(nullptr, &s), ZS_INVALID_ARGUMENT);
  EXPECT_STREQ(LastError(), "zs_loss_scaler_init: config is NULL");
  EXPECT_EQ(zs_loss_scaler_init(&good, nullptr), ZS_INVALID_ARGUMENT);
  EXPECT_STREQ(LastError(), "zs_loss_scaler_init: state is NULL");
  EXPECT_EQ(zs_loss_scaler_update(nullptr, &s, 0), ZS_INVALID_ARGUMENT);
  EXPECT_EQ(zs_loss_scaler_update(&good, nullptr, 0), ZS_INVALID_ARGUMENT);
  char buf[4] = "abc";
  EXPECT_EQ(zs_config_describe(nullptr, buf, sizeof(buf)), 0u);
  EXPECT_STREQ(buf, "");
  EXPECT_GT(zs_config_describe(&good, nullptr, 0), 10u);
  EXPECT_EQ(zs_config_describe(&good, buf, sizeof(buf)),
            zs_config_describe(&good, nullptr, 0));
  EXPECT_STREQ(buf, "sta");  // cut, terminated

  // Fields out of range: INVALID_ARGUMENT naming the field, nothing written.
  struct Spoil {
    void (*apply)(zs_train_config*);
    const char* words;
  };
  const Spoil spoils[] = {
      {[](zs_train_config* c) { c->world_size = 0; }, "config.world_size"},
      {[](zs_train_config* c) { c->train_batch_size = 33; },
       "train_batch_size (33) must equal"},
      {[](zs_train_config* c) { c->micro_batch_per_worker = int64_t{1} << 62; },
       "config.micro_batch_per_worker"},
      {[](zs_train_config* c) { c->gradient_clipping = -1; },
       "config.gradient_clipping must be finite and >= 0, got -1"},
      {[](zs_train_config* c) { std::strcpy(c->optimizer_type, "SGD"); },
       "config.optimizer_type must be \"Adam\" or \"AdamW\""},
      {[](zs_train_config* c) {
         std::memset(c->optimizer_type, 'A', sizeof(c->optimizer_type));
       },
       "config.optimizer_type must be NUL-terminated"},
      {[](zs_train_config* c) { c->beta2 = 1; },
       "config.beta2 must be in [0, 1)"},
      {[](zs_train_config* c) { c->eps = 0; },
       "config.eps must be finite and > 0"},
      {[](zs_train_config* c) { c->lr_schedule = 7; },
       "config.lr_schedule must be in [0, 3], got 7"},
      {[](zs_train_config* c) { c->warmup_linear = 2; },
       "config.warmup_linear must be 0 or 1, got 2"},
      {[](zs_train_config* c) { c->total_num_steps = 50; },
       "config.total_num_steps must be other than the warmup length 50"},
      {[](zs_train_config* c) { c->total_num_steps = 0; },
       "config.total_num_steps must be >= 1"},
      {[](zs_train_config* c) { c->precision = 3; }, "config.precision"},
      {[](zs_train_config* c) { c->static_loss_scale = 0; },
       "config.static_loss_scale must be finite and > 0"},
      {[](zs_train_config* c) { c->loss_scale_window = 0; },
       "config.loss_scale_window must be >= 1"},
      {[](zs_train_config* c) { c->hysteresis = 0; }, "config.hysteresis"},
      {[](zs_train_config* c) { c->min_loss_scale = 0; },
       "config.min_loss_scale"},
      {[](zs_train_config* c) { c->stage = 4; }, "config.stage"},
      {[](zs_train_config* c) { c->stage = 2; },
       "config.stage must be 3 with offload_param_server 1, got 2"},
      {[](zs_train_config* c) { c->sub_group_size = -1; },
       "config.sub_group_size must be >= 0, got -1"},
      {[](zs_train_config* c) { c->num_servers = -1; }, "config.num_servers"},
      {[](zs_train_config* c) { std::strcpy(c->servers, "h:1,h:2,h:3"); },
       "config.num_servers must be the number of addresses in servers (3)"},
      {[](zs_train_config* c) { std::strcpy(c->servers, "h:1,"); },
       "config.servers must be addresses joined by ','"},
      {[](zs_train_config* c) { c->alignment = 0; }, "config.alignment"},
      {[](zs_train_config* c) { c->checkpoint_interval = -1; },
       "config.checkpoint_interval"},
      {[](zs_train_config* c) { c->delayed_parameter_update = 2; },
       "config.delayed_parameter_update must be 0 or 1, got 2"},
      {[](zs_train_config* c) { c->no_bias_correction = -1; },
       "config.no_bias_correction must be 0 or 1, got -1"},
      {[](zs_train_config* c) { c->delayed_update_warmup_steps = 0; },
       "config.delayed_update_warmup_steps must be >= 1, got 0"},
  };
  for (const Spoil& spoil : spoils) {
    SCOPED_TRACE(spoil.words);
    zs_train_config bad = good;
    spoil.apply(&bad);
    lr = 42;
    EXPECT_EQ(zs_config_lr(&bad, 3, &lr), ZS_INVALID_ARGUMENT);
    EXPECT_THAT(LastError(), HasSubstr(spoil.words));
    EXPECT_EQ(lr, 42);
    EXPECT_EQ(zs_loss_scaler_init(&bad, &s), ZS_INVALID_ARGUMENT);
    EXPECT_EQ(zs_loss_scaler_update(&bad, &s, 0), ZS_INVALID_ARGUMENT);
    EXPECT_EQ(std::memcmp(&s, &marked, sizeof(s)), 0);
    EXPECT_EQ(zs_config_describe(&bad, buf, sizeof(buf)), 0u);
    EXPECT_FALSE(FromTrainConfig(bad).ok());
  }
  EXPECT_EQ(zs_config_lr(&good, 3, &lr), ZS_OK);
  EXPECT_STREQ(LastError(), "");
}

// zs_config_resolve: the parser with inputs for "auto", a JSON report.
TEST(ConfigApiTest, ResolveFillsAutos) {
  const std::string path = TestData("hf_auto.json");
  zs_train_config c = Garbage();
  char report[1 << 14];
  size_t length = 0;
  ASSERT_EQ(zs_config_resolve(nullptr, path.c_str(), 2,
                              "--learning_rate=2e-4 --precision=bf16 "
                              "--hidden_size=16",
                              &c, report, sizeof(report), &length),
            ZS_OK)
      << LastError();
  EXPECT_EQ(c.lr, 2e-4);
  EXPECT_EQ(c.precision, ZS_PRECISION_BF16);
  EXPECT_EQ(c.reduce_bucket_size, 256);
  EXPECT_EQ(length, std::strlen(report));
  const std::string r = report;
  // (The JSON object's keys come in no fixed order.)
  EXPECT_THAT(r, HasSubstr(R"("key":"optimizer.params.lr")"));
  EXPECT_THAT(r, HasSubstr(R"("value":"0.0002")"));
  EXPECT_THAT(r, HasSubstr(R"("source":"auto←--learning_rate")"));
  EXPECT_THAT(r, HasSubstr(R"("warnings":[])"));
  EXPECT_THAT(r, HasSubstr(R"("server_flags":[])"));
  EXPECT_THAT(r, HasSubstr(R"("table":")"));
  // The same text: same answer.
  zs_train_config d = Garbage();
  const std::string json = ReadFile(path);
  ASSERT_EQ(zs_config_resolve(json.c_str(), nullptr, 2,
                              "--learning_rate=2e-4 --precision=bf16 "
                              "--hidden_size=16",
                              &d, nullptr, 0, nullptr),
            ZS_OK);
  EXPECT_EQ(std::memcmp(&c, &d, sizeof(c)), 0);
  // Nothing fills lr: the key and the input named, *out untouched.
  zs_train_config e = Garbage();
  EXPECT_EQ(zs_config_resolve(nullptr, path.c_str(), 2, "--precision=fp16", &e,
                              report, sizeof(report), nullptr),
            ZS_INVALID_ARGUMENT);
  EXPECT_THAT(LastError(), HasSubstr("optimizer.params.lr"));
  EXPECT_THAT(LastError(), HasSubstr("--learning_rate"));
  const zs_train_config garbage = Garbage();
  EXPECT_EQ(std::memcmp(&e, &garbage, sizeof(e)), 0);
  // Bad uses.
  EXPECT_EQ(zs_config_resolve(json.c_str(), path.c_str(), 2, "", &e, nullptr, 0,
                              nullptr),
            ZS_INVALID_ARGUMENT);
  EXPECT_EQ(zs_config_resolve(nullptr, path.c_str(), 2, "--lerning_rate=1", &e,
                              nullptr, 0, nullptr),
            ZS_INVALID_ARGUMENT);
  EXPECT_THAT(LastError(), HasSubstr("did you mean --learning_rate"));
  // zs_config_parse has no inputs: its error names the call that has.
  EXPECT_EQ(zs_config_parse_file(path.c_str(), 2, &e, nullptr, 0, nullptr),
            ZS_INVALID_ARGUMENT);
  EXPECT_THAT(LastError(), HasSubstr("optimizer.params.lr"));
  EXPECT_THAT(LastError(), HasSubstr("zs_config_resolve takes the inputs"));
  EXPECT_EQ(std::memcmp(&e, &garbage, sizeof(e)), 0);
}

}  // namespace
}  // namespace zeroshard::config
