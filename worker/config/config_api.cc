// client/zeroshard.h's configuration functions over the engine's parser
// (ds_config.h), schedules (lr_schedule.h) and loss scaler (loss_scaler.h,
// scaler_record.h); see config_api.h.
#include "worker/config/config_api.h"

#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/capi/handles.h"
#include "common/status_macros.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "worker/config/auto_inputs.h"
#include "worker/config/resolved_table.h"
#include "worker/engine/loss_scaler.h"
#include "worker/engine/lr_schedule.h"
#include "worker/engine/precision.h"
#include "worker/engine/scaler_record.h"

namespace zeroshard::config {
namespace {

using engine::LossScaler;
using engine::LossScalerOptions;
using engine::LossScalerState;
using engine::LrScheduleType;
using engine::Precision;
using engine::WarmupType;

// The C enums are the C++ enums' values.
static_assert(ZS_PRECISION_FP32 == static_cast<int>(Precision::kFp32) &&
              ZS_PRECISION_FP16 == static_cast<int>(Precision::kFp16) &&
              ZS_PRECISION_BF16 == static_cast<int>(Precision::kBf16));
static_assert(ZS_LR_CONSTANT == static_cast<int>(LrScheduleType::kConstant) &&
              ZS_LR_WARMUP == static_cast<int>(LrScheduleType::kWarmupLR) &&
              ZS_LR_WARMUP_DECAY ==
                  static_cast<int>(LrScheduleType::kWarmupDecayLR) &&
              ZS_LR_WARMUP_COSINE ==
                  static_cast<int>(LrScheduleType::kWarmupCosineLR));
static_assert(static_cast<int>(WarmupType::kLog) == 0 &&
              static_cast<int>(WarmupType::kLinear) == 1);

template <class T>
absl::Status Bad(absl::string_view field, absl::string_view want, T got) {
  return absl::InvalidArgumentError(
      absl::StrCat("config.", field, " must be ", want, ", got ", got));
}

absl::Status InRange(absl::string_view field, int64_t v, int64_t min,
                     int64_t max) {
  if (v >= min && v <= max) return absl::OkStatus();
  return Bad(field, absl::StrCat("in [", min, ", ", max, "]"), v);
}

absl::Status NotBelow(absl::string_view field, int64_t v, int64_t min) {
  if (v >= min) return absl::OkStatus();
  return Bad(field, absl::StrCat(">= ", min), v);
}

absl::StatusOr<bool> Flag(absl::string_view field, int32_t v) {
  if (v == 0 || v == 1) return v == 1;
  return Bad(field, "0 or 1", v);
}

absl::Status NonNegative(absl::string_view field, double v) {
  if (std::isfinite(v) && v >= 0) return absl::OkStatus();
  return Bad(field, "finite and >= 0", v);
}

absl::Status Positive(absl::string_view field, double v) {
  if (std::isfinite(v) && v > 0) return absl::OkStatus();
  return Bad(field, "finite and > 0", v);
}

// The NUL-terminated text of a fixed char array.
template <size_t N>
absl::StatusOr<std::string> Text(absl::string_view field,
                                 const char (&chars)[N]) {
  const void* end = std::memchr(chars, '\0', N);
  if (end != nullptr) return std::string(chars, static_cast<const char*>(end));
  return Bad(field, absl::StrCat("NUL-terminated within ", N, " bytes"),
             "no NUL");
}

// `text` into a fixed char array, or false when it does not fit whole.
template <size_t N>
bool PutText(const std::string& text, char (&chars)[N]) {
  if (text.size() >= N) return false;
  capi::CopyString(text, chars, N);
  return true;
}

absl::Status ToBatch(const zs_train_config& t, BatchSizes* out) {
  ZS_RETURN_IF_ERROR(NotBelow("world_size", t.world_size, 1));
  ZS_RETURN_IF_ERROR(NotBelow("train_batch_size", t.train_batch_size, 1));
  ZS_RETURN_IF_ERROR(
      NotBelow("micro_batch_per_worker", t.micro_batch_per_worker, 1));
  ZS_RETURN_IF_ERROR(NotBelow("gradient_accumulation_steps",
                              t.gradient_accumulation_steps, 1));
  int64_t product = 0;
  if (__builtin_mul_overflow(t.micro_batch_per_worker,
                             t.gradient_accumulation_steps, &product) ||
      __builtin_mul_overflow(product, int64_t{t.world_size}, &product)) {
    return Bad("micro_batch_per_worker",
               "such that micro * accumulation * world_size fits 64 bits",
               t.micro_batch_per_worker);
  }
  // The parser's rule (train = micro * gas * world) and message.
  ZS_ASSIGN_OR_RETURN(
      *out, ResolveBatchSizes(t.train_batch_size, t.micro_batch_per_worker,
                              t.gradient_accumulation_steps, t.world_size));
  return absl::OkStatus();
}

absl::Status ToOptimizer(const zs_train_config& t, AdamWConfig* out) {
  ZS_ASSIGN_OR_RETURN(out->type, Text("optimizer_type", t.optimizer_type));
  const std::string type = absl::AsciiStrToLower(out->type);
  if (type != "adam" && type != "adamw") {
    return Bad("optimizer_type", "\"Adam\" or \"AdamW\" (any case)",
               absl::StrCat("\"", out->type, "\""));
  }
  ZS_RETURN_IF_ERROR(NonNegative("lr", t.lr));
  for (const auto& [field, beta] :
       {std::make_pair("beta1", t.beta1), std::make_pair("beta2", t.beta2)}) {
    if (!(beta >= 0 && beta < 1)) return Bad(field, "in [0, 1)", beta);
  }
  // > 0: with eps 0 a parameter whose gradients were all 0 updates by 0/0.
  ZS_RETURN_IF_ERROR(Positive("eps", t.eps));
  ZS_RETURN_IF_ERROR(NonNegative("weight_decay", t.weight_decay));
  out->lr = t.lr;
  out->beta1 = t.beta1;
  out->beta2 = t.beta2;
  out->eps = t.eps;
  out->weight_decay = t.weight_decay;
  ZS_ASSIGN_OR_RETURN(const bool no_bias_correction,
                      Flag("no_bias_correction", t.no_bias_correction));
  out->bias_correction = !no_bias_correction;
  return absl::OkStatus();
}

absl::Status ToSchedule(const zs_train_config& t, engine::LrSchedule* out) {
  ZS_RETURN_IF_ERROR(InRange("lr_schedule", t.lr_schedule, 0, 3));
  out->type = static_cast<LrScheduleType>(t.lr_schedule);
  ZS_RETURN_IF_ERROR(NonNegative("schedule_lr", t.schedule_lr));
  ZS_RETURN_IF_ERROR(NonNegative("warmup_min_lr", t.warmup_min_lr));
  ZS_RETURN_IF_ERROR(NonNegative("warmup_max_lr", t.warmup_max_lr));
  ZS_RETURN_IF_ERROR(NotBelow("warmup_num_steps", t.warmup_num_steps, 0));
  ZS_ASSIGN_OR_RETURN(bool linear, Flag("warmup_linear", t.warmup_linear));
  const bool needs_total = out->type == LrScheduleType::kWarmupDecayLR ||
                           out->type == LrScheduleType::kWarmupCosineLR;
  ZS_RETURN_IF_ERROR(
      NotBelow("total_num_steps", t.total_num_steps, needs_total ? 1 : 0));
  ZS_RETURN_IF_ERROR(NonNegative("warmup_min_ratio", t.warmup_min_ratio));
  ZS_RETURN_IF_ERROR(NonNegative("cos_min_ratio", t.cos_min_ratio));
  out->lr = t.schedule_lr;
  out->warmup_min_lr = t.warmup_min_lr;
  out->warmup_max_lr = t.warmup_max_lr;
  out->warmup_num_steps = t.warmup_num_steps;
  out->warmup_type = linear ? WarmupType::kLinear : WarmupType::kLog;
  out->total_num_steps = t.total_num_steps;
  out->warmup_min_ratio = t.warmup_min_ratio;
  out->cos_min_ratio = t.cos_min_ratio;
  if (out->type == LrScheduleType::kWarmupCosineLR &&
      out->total_num_steps == engine::EffectiveWarmupSteps(*out)) {
    return Bad("total_num_steps",
               absl::StrCat("other than the warmup length ",
                            engine::EffectiveWarmupSteps(*out),
                            " (WarmupCosineLR divides by their difference)"),
               t.total_num_steps);
  }
  return absl::OkStatus();
}

absl::Status ToScaler(const zs_train_config& t, EngineConfig* out) {
  ZS_RETURN_IF_ERROR(InRange("precision", t.precision, 0, 2));
  out->precision = static_cast<Precision>(t.precision);
  LossScalerOptions& s = out->loss_scaler;
  ZS_ASSIGN_OR_RETURN(s.dynamic,
                      Flag("loss_scale_dynamic", t.loss_scale_dynamic));
  // The parser gives a dynamic scaler static_scale 0 (fp16.loss_scale).
  ZS_RETURN_IF_ERROR(s.dynamic
                         ? NonNegative("static_loss_scale", t.static_loss_scale)
                         : Positive("static_loss_scale", t.static_loss_scale));
  ZS_RETURN_IF_ERROR(Positive("initial_loss_scale", t.initial_loss_scale));
  ZS_RETURN_IF_ERROR(NotBelow("loss_scale_window", t.loss_scale_window, 1));
  ZS_RETURN_IF_ERROR(NotBelow("hysteresis", t.hysteresis, 1));
  ZS_ASSIGN_OR_RETURN(s.consecutive_hysteresis,
                      Flag("consecutive_hysteresis", t.consecutive_hysteresis));
  ZS_RETURN_IF_ERROR(Positive("min_loss_scale", t.min_loss_scale));
  s.static_scale = t.static_loss_scale;
  s.initial_scale = t.initial_loss_scale;
  s.scale_window = t.loss_scale_window;
  s.hysteresis = t.hysteresis;
  s.min_scale = t.min_loss_scale;
  return absl::OkStatus();
}

// The zero_optimization sizes, in the struct's order.
struct SizeField {
  const char* name;
  int64_t zs_train_config::*c;
  int64_t ZeroConfig::*cc;
};
constexpr SizeField kSizes[] = {
    {"reduce_bucket_size", &zs_train_config::reduce_bucket_size,
     &ZeroConfig::reduce_bucket_size},
    {"allgather_bucket_size", &zs_train_config::allgather_bucket_size,
     &ZeroConfig::allgather_bucket_size},
    {"stage3_prefetch_bucket_size",
     &zs_train_config::stage3_prefetch_bucket_size,
     &ZeroConfig::stage3_prefetch_bucket_size},
    {"stage3_max_live_parameters", &zs_train_config::stage3_max_live_parameters,
     &ZeroConfig::stage3_max_live_parameters},
    {"stage3_max_reuse_distance", &zs_train_config::stage3_max_reuse_distance,
     &ZeroConfig::stage3_max_reuse_distance},
    {"stage3_param_persistence_threshold",
     &zs_train_config::stage3_param_persistence_threshold,
     &ZeroConfig::stage3_param_persistence_threshold},
    {"sub_group_size", &zs_train_config::sub_group_size,
     &ZeroConfig::sub_group_size},
};

absl::Status ToZero(const zs_train_config& t, ZeroConfig* out) {
  ZS_RETURN_IF_ERROR(InRange("stage", t.stage, 0, 3));
  out->stage = t.stage;
  ZS_ASSIGN_OR_RETURN(out->overlap_comm, Flag("overlap_comm", t.overlap_comm));
  ZS_ASSIGN_OR_RETURN(out->contiguous_gradients,
                      Flag("contiguous_gradients", t.contiguous_gradients));
  ZS_ASSIGN_OR_RETURN(out->reduce_scatter,
                      Flag("reduce_scatter", t.reduce_scatter));
  for (const SizeField& f : kSizes) {
    ZS_RETURN_IF_ERROR(NotBelow(f.name, t.*f.c, 0));
    out->*f.cc = t.*f.c;
  }
  ZS_ASSIGN_OR_RETURN(bool server,
                      Flag("offload_param_server", t.offload_param_server));
  if (server && t.stage != 3) {
    return Bad("stage", "3 with offload_param_server 1", t.stage);
  }
  out->offload_param = server ? OffloadDevice::kServer : OffloadDevice::kNone;
  return absl::OkStatus();
}

absl::Status ToZeroShard(const zs_train_config& t, ZeroShardConfig* out) {
  ZS_RETURN_IF_ERROR(InRange("num_servers", t.num_servers, 0, 1 << 20));
  ZS_ASSIGN_OR_RETURN(const std::string servers, Text("servers", t.servers));
  if (!servers.empty()) {
    out->server_addresses = absl::StrSplit(servers, ',');
    for (const std::string& a : out->server_addresses) {
      if (a.empty()) {
        return Bad("servers", "addresses joined by ','",
                   absl::StrCat("\"", servers, "\""));
      }
    }
    const int64_t listed = static_cast<int64_t>(out->server_addresses.size());
    if (t.num_servers != listed) {
      return Bad(
          "num_servers",
          absl::StrCat("the number of addresses in servers (", listed, ")"),
          t.num_servers);
    }
  }
  out->num_servers = t.num_servers;
  ZS_ASSIGN_OR_RETURN(out->server_aggregation,
                      Flag("server_aggregation", t.server_aggregation));
  ZS_RETURN_IF_ERROR(NotBelow("alignment", t.alignment, 1));
  out->alignment = t.alignment;
  ZS_RETURN_IF_ERROR(NotBelow("checkpoint_interval", t.checkpoint_interval, 0));
  out->checkpoint_interval = t.checkpoint_interval;
  ZS_ASSIGN_OR_RETURN(
      out->delayed_parameter_update,
      Flag("delayed_parameter_update", t.delayed_parameter_update));
  ZS_RETURN_IF_ERROR(NotBelow("delayed_update_warmup_steps",
                              t.delayed_update_warmup_steps, 1));
  out->delayed_update_warmup_steps = t.delayed_update_warmup_steps;
  return absl::OkStatus();
}

// ------------------------------------------------- the C functions' bodies

using capi::NotNull;

// What zs_config_parse and zs_config_parse_file share: the arguments'
// checks, the warnings written out (also on error) and *out on success.
// `parse(&warnings)` runs the parser.
template <class Parse>
absl::Status ParseInto(int world_size, zs_train_config* out, char* warnings,
                       size_t warnings_size, size_t* warnings_length,
                       Parse parse) {
  ZS_RETURN_IF_ERROR(NotNull(out, "out"));
  if (warnings == nullptr && warnings_size > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("warnings is NULL with warnings_size ", warnings_size));
  }
  if (world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("world_size must be >= 1, got ", world_size));
  }
  std::vector<std::string> list;
  absl::StatusOr<EngineConfig> config = parse(&list);
  absl::StatusOr<zs_train_config> c =
      config.ok() ? ToTrainConfig(*config) : config.status();
  std::string text;
  for (const std::string& w : list) absl::StrAppend(&text, w, "\n");
  const size_t length = capi::CopyString(text, warnings, warnings_size);
  if (warnings_length != nullptr) *warnings_length = length;
  if (!c.ok()) return c.status();
  *out = *c;
  return absl::OkStatus();
}

// zs_config_resolve's report: a JSON object (see client/zeroshard.h).
std::string ResolveReport(const std::vector<std::string>& warnings,
                          const EngineConfig* c) {
  google::protobuf::Struct report;
  auto& fields = *report.mutable_fields();
  auto* list = fields["warnings"].mutable_list_value();
  for (const std::string& w : warnings) list->add_values()->set_string_value(w);
  if (c != nullptr) {
    auto* rows = fields["resolved"].mutable_list_value();
    for (const ResolvedKey& r : c->resolved) {
      auto& row = *rows->add_values()->mutable_struct_value()->mutable_fields();
      row["key"].set_string_value(r.key);
      row["value"].set_string_value(r.value);
      row["source"].set_string_value(r.source);
    }
    fields["table"].set_string_value(RenderResolvedTable(c->resolved, false));
    auto* flags = fields["server_flags"].mutable_list_value();
    for (const std::string& f : NvmeServerFlags(*c)) {
      flags->add_values()->set_string_value(f);
    }
  }
  std::string out;
  if (!google::protobuf::util::MessageToJsonString(report, &out).ok()) {
    return "{}";
  }
  return out;
}

// The scaler options of `config` the engine would use (fp16's, else a
// static scale 1).
absl::StatusOr<LossScalerOptions> ScalerOptionsOf(
    const zs_train_config* config) {
  ZS_RETURN_IF_ERROR(NotNull(config, "config"));
  ZS_ASSIGN_OR_RETURN(const EngineConfig c, FromTrainConfig(*config));
  return engine::ScalerOptionsFor(c.precision, c.loss_scaler);
}

LossScalerState RecordIn(const zs_trainer_state& s) {
  LossScalerState r;
  r.scale = s.loss_scale;
  r.hysteresis_left = s.loss_scale_hysteresis;
  r.iteration = s.loss_scale_iteration;
  r.last_overflow_iteration = s.loss_scale_last_overflow;
  return r;
}

void WriteRecord(const LossScalerState& r, zs_trainer_state* s) {
  s->loss_scale = r.scale;
  s->loss_scale_hysteresis = r.hysteresis_left;
  s->loss_scale_iteration = r.iteration;
  s->loss_scale_last_overflow = r.last_overflow_iteration;
}

}  // namespace

absl::StatusOr<zs_train_config> ToTrainConfig(const EngineConfig& c) {
  zs_train_config t;
  std::memset(&t, 0, sizeof(t));
  t.train_batch_size = c.batch.train_batch_size;
  t.micro_batch_per_worker = c.batch.micro_batch_per_worker;
  t.gradient_accumulation_steps = c.batch.gradient_accumulation_steps;
  t.world_size = c.batch.world_size;
  t.gradient_clipping = c.gradient_clipping;
  if (!PutText(c.optimizer.type, t.optimizer_type)) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer.type \"", c.optimizer.type,
                     "\" is over the 15 bytes zs_train_config holds"));
  }
  t.lr = c.optimizer.lr;
  t.beta1 = c.optimizer.beta1;
  t.beta2 = c.optimizer.beta2;
  t.eps = c.optimizer.eps;
  t.weight_decay = c.optimizer.weight_decay;
  const engine::LrSchedule& s = c.lr_schedule;
  t.lr_schedule = static_cast<int32_t>(s.type);
  t.schedule_lr = s.lr;
  t.warmup_min_lr = s.warmup_min_lr;
  t.warmup_max_lr = s.warmup_max_lr;
  t.warmup_num_steps = s.warmup_num_steps;
  t.warmup_linear = s.warmup_type == WarmupType::kLinear;
  t.total_num_steps = s.total_num_steps;
  t.warmup_min_ratio = s.warmup_min_ratio;
  t.cos_min_ratio = s.cos_min_ratio;
  t.precision = static_cast<int32_t>(c.precision);
  const LossScalerOptions& l = c.loss_scaler;
  t.loss_scale_dynamic = l.dynamic;
  t.static_loss_scale = l.static_scale;
  t.initial_loss_scale = l.initial_scale;
  t.loss_scale_window = l.scale_window;
  t.hysteresis = l.hysteresis;
  t.consecutive_hysteresis = l.consecutive_hysteresis;
  t.min_loss_scale = l.min_scale;
  t.stage = c.zero.stage;
  t.overlap_comm = c.zero.overlap_comm;
  t.contiguous_gradients = c.zero.contiguous_gradients;
  t.reduce_scatter = c.zero.reduce_scatter;
  for (const SizeField& f : kSizes) t.*f.c = c.zero.*f.cc;
  t.offload_param_server = c.zero.offload_param == OffloadDevice::kServer;
  t.num_servers = c.zeroshard.num_servers;
  for (size_t i = 0; i < c.zeroshard.server_addresses.size(); ++i) {
    if (c.zeroshard.server_addresses[i].find(',') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "zeroshard.servers[", i, "] \"", c.zeroshard.server_addresses[i],
          "\" holds a ',', which zs_train_config.servers separates by"));
    }
  }
  const std::string servers = absl::StrJoin(c.zeroshard.server_addresses, ",");
  if (!PutText(servers, t.servers)) {
    return absl::InvalidArgumentError(
        absl::StrCat("zeroshard.servers: the addresses joined by ',' are ",
                     servers.size(), " bytes, over the ", sizeof(t.servers) - 1,
                     " zs_train_config.servers holds"));
  }
  t.server_aggregation = c.zeroshard.server_aggregation;
  t.alignment = c.zeroshard.alignment;
  t.checkpoint_interval = c.zeroshard.checkpoint_interval;
  t.delayed_parameter_update = c.zeroshard.delayed_parameter_update;
  t.delayed_update_warmup_steps = c.zeroshard.delayed_update_warmup_steps;
  t.no_bias_correction = c.optimizer.bias_correction ? 0 : 1;
  return t;
}

absl::StatusOr<EngineConfig> FromTrainConfig(const zs_train_config& t) {
  EngineConfig c;
  ZS_RETURN_IF_ERROR(ToBatch(t, &c.batch));
  ZS_RETURN_IF_ERROR(NonNegative("gradient_clipping", t.gradient_clipping));
  c.gradient_clipping = t.gradient_clipping;
  ZS_RETURN_IF_ERROR(ToOptimizer(t, &c.optimizer));
  ZS_RETURN_IF_ERROR(ToSchedule(t, &c.lr_schedule));
  ZS_RETURN_IF_ERROR(ToScaler(t, &c));
  ZS_RETURN_IF_ERROR(ToZero(t, &c.zero));
  ZS_RETURN_IF_ERROR(ToZeroShard(t, &c.zeroshard));
  return c;
}

}  // namespace zeroshard::config

namespace zeroshard::config {
namespace {

// zs_config_parse has no inputs to fill "auto" with: the error about a
// fillable "auto" left unfilled (ObjectReader's) names the call that has.
absl::Status WithResolveHint(absl::Status s) {
  if (s.ok() ||
      !absl::StrContains(s.message(), "\"auto\" with nothing to fill it")) {
    return s;
  }
  return absl::Status(
      s.code(), absl::StrCat(s.message(),
                             " (zs_config_parse fills no \"auto\": "
                             "zs_config_resolve takes the inputs that do)"));
}

}  // namespace
}  // namespace zeroshard::config

using zeroshard::capi::Blame;
using zeroshard::capi::NotNull;
using zeroshard::capi::Run;
namespace config = zeroshard::config;
namespace engine = zeroshard::engine;

extern "C" {

int zs_config_parse(const char* json, int world_size, zs_train_config* out,
                    char* warnings, size_t warnings_size,
                    size_t* warnings_length) {
  return Run("zs_config_parse", [&](Blame*) -> absl::Status {
    ZS_RETURN_IF_ERROR(NotNull(json, "json"));
    return config::WithResolveHint(config::ParseInto(
        world_size, out, warnings, warnings_size, warnings_length,
        [&](std::vector<std::string>* w) {
          return config::ParseDeepSpeedConfig(json, world_size, w);
        }));
  });
}

int zs_config_parse_file(const char* path, int world_size, zs_train_config* out,
                         char* warnings, size_t warnings_size,
                         size_t* warnings_length) {
  return Run("zs_config_parse_file", [&](Blame*) -> absl::Status {
    ZS_RETURN_IF_ERROR(NotNull(path, "path"));
    return config::WithResolveHint(config::ParseInto(
        world_size, out, warnings, warnings_size, warnings_length,
        [&](std::vector<std::string>* w) {
          return config::ParseDeepSpeedConfigFile(path, world_size, w);
        }));
  });
}

int zs_config_resolve(const char* json, const char* path, int world_size,
                      const char* inputs, zs_train_config* out, char* report,
                      size_t report_size, size_t* report_length) {
  return Run("zs_config_resolve", [&](Blame*) -> absl::Status {
    if ((json == nullptr) == (path == nullptr)) {
      return absl::InvalidArgumentError(
          "give exactly one of json and path (the other NULL)");
    }
    ZS_RETURN_IF_ERROR(NotNull(out, "out"));
    if (report == nullptr && report_size > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("report is NULL with report_size ", report_size));
    }
    if (world_size < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("world_size must be >= 1, got ", world_size));
    }
    std::vector<std::string> warnings;
    absl::StatusOr<config::EngineConfig> c = absl::UnknownError("unset");
    absl::StatusOr<config::AutoInputs> in =
        config::ParseAutoInputs(inputs == nullptr ? "" : inputs);
    if (!in.ok()) {
      c = in.status();
    } else if (json != nullptr) {
      c = config::ParseDeepSpeedConfig(json, world_size, *in, &warnings);
    } else {
      c = config::ParseDeepSpeedConfigFile(path, world_size, *in, &warnings);
    }
    absl::StatusOr<zs_train_config> t =
        c.ok() ? config::ToTrainConfig(*c) : c.status();
    const std::string text =
        config::ResolveReport(warnings, t.ok() ? &*c : nullptr);
    const size_t length =
        zeroshard::capi::CopyString(text, report, report_size);
    if (report_length != nullptr) *report_length = length;
    if (!t.ok()) return t.status();
    *out = *t;
    return absl::OkStatus();
  });
}

size_t zs_config_describe(const zs_train_config* c, char* buf, size_t size) {
  try {
    if (c != nullptr) {
      absl::StatusOr<config::EngineConfig> e = config::FromTrainConfig(*c);
      if (e.ok()) {
        return zeroshard::capi::CopyString(config::DescribeEngineConfig(*e),
                                           buf, size);
      }
    }
  } catch (...) {
  }
  return zeroshard::capi::CopyString("", buf, size);
}

int zs_config_lr(const zs_train_config* c, int64_t step, double* lr) {
  return Run("zs_config_lr", [&](Blame*) -> absl::Status {
    ZS_RETURN_IF_ERROR(NotNull(c, "config"));
    ZS_RETURN_IF_ERROR(NotNull(lr, "lr"));
    if (step < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "step ", step, " is negative (the number of updates so far)"));
    }
    ZS_ASSIGN_OR_RETURN(const config::EngineConfig e,
                        config::FromTrainConfig(*c));
    *lr = engine::UpdateLearningRate(e.lr_schedule, step);
    return absl::OkStatus();
  });
}

int zs_loss_scaler_init(const zs_train_config* c, zs_trainer_state* state) {
  return Run("zs_loss_scaler_init", [&](Blame*) -> absl::Status {
    ZS_RETURN_IF_ERROR(NotNull(state, "state"));
    ZS_ASSIGN_OR_RETURN(const engine::LossScalerOptions options,
                        config::ScalerOptionsOf(c));
    config::WriteRecord(engine::RecordOf(engine::LossScaler(options)), state);
    return absl::OkStatus();
  });
}

int zs_loss_scaler_update(const zs_train_config* c, zs_trainer_state* state,
                          int overflow) {
  return Run("zs_loss_scaler_update", [&](Blame*) -> absl::Status {
    ZS_RETURN_IF_ERROR(NotNull(state, "state"));
    ZS_ASSIGN_OR_RETURN(const engine::LossScalerOptions options,
                        config::ScalerOptionsOf(c));
    // As the engine: continue from the recorded state, update, record.
    ZS_ASSIGN_OR_RETURN(
        engine::LossScaler scaler,
        engine::ScalerFromRecord(options, config::RecordIn(*state)));
    ZS_RETURN_IF_ERROR(scaler.Update(overflow != 0));
    config::WriteRecord(engine::RecordOf(scaler), state);
    return absl::OkStatus();
  });
}

}  // extern "C"
