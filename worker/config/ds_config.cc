#include "worker/config/ds_config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "google/protobuf/struct.pb.h"
#include "worker/config/ds_config_sections.h"
#include "worker/config/json_parse.h"
#include "worker/config/json_reader.h"

namespace zeroshard::config {
namespace {

using internal::ObjectReader;
using internal::ReadLog;

using google::protobuf::Value;
using internal::AutoFill;

// The batch sizes, and their rows in the resolved table.
absl::Status ParseBatch(ObjectReader& root, int world_size, BatchSizes* out) {
  std::string train_from, micro_from, gas_from;
  // The engine counts samples in an int.
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  ZS_ASSIGN_OR_RETURN(
      int64_t train, root.IntOrUnset("train_batch_size", 1, &train_from, kMax));
  ZS_ASSIGN_OR_RETURN(
      int64_t micro,
      root.IntOrUnset("train_micro_batch_size_per_gpu", 1, &micro_from, kMax));
  ZS_ASSIGN_OR_RETURN(
      int64_t gas,
      root.IntOrUnset("gradient_accumulation_steps", 1, &gas_from, kMax));
  absl::StatusOr<BatchSizes> b =
      ResolveBatchSizes(train, micro, gas, world_size);
  if (!b.ok()) {
    const std::vector<std::string>& autos = root.log()->auto_keys;
    if (std::find(autos.begin(), autos.end(),
                  "train_micro_batch_size_per_gpu") != autos.end() &&
        train < 0 && micro < 0) {
      // An "auto" left unfilled (Parse's caller names them all): read on
      // with a micro batch of 1.
      root.log()->AddUnfilled(
          "train_micro_batch_size_per_gpu: give --per_device_train_batch_size "
          "(or a train_batch_size in the config)");
      b = ResolveBatchSizes(train, 1, gas, world_size);
    }
    if (!b.ok()) return b.status();
  }
  *out = *b;
  const std::string rule =
      absl::StrCat("derived (train_batch_size = micro x accumulation x ",
                   world_size, " workers)");
  root.Note("train_batch_size", absl::StrCat(out->train_batch_size),
            train_from.empty() ? rule : train_from);
  root.Note("train_micro_batch_size_per_gpu",
            absl::StrCat(out->micro_batch_per_worker),
            micro_from.empty() ? rule : micro_from);
  root.Note("gradient_accumulation_steps",
            absl::StrCat(out->gradient_accumulation_steps),
            gas_from.empty() ? rule : gas_from);
  return absl::OkStatus();
}

Value NumberValue(double d) {
  Value v;
  v.set_number_value(d);
  return v;
}

Value BoolValue(bool b) {
  Value v;
  v.set_bool_value(b);
  return v;
}

// ReadLog::fills from `in` (see auto_inputs.h for the rules).
void AddFills(const AutoInputs& in, int world_size, ReadLog* log) {
  auto& fills = log->fills;
  const auto set = [&](const std::string& path, Value v, std::string source,
                       std::string flag) {
    AutoFill& f = fills[path];
    f.value = std::move(v);
    f.source = std::move(source);
    f.flag = std::move(flag);
  };
  const auto missing = [&](const std::string& path, std::string why) {
    fills[path].missing = std::move(why);
  };
  const auto derive = [&](const std::string& path) {
    fills[path].derive = true;
  };
  // A flag with Hugging Face's default when not given.
  const auto flag_or_default = [&](const std::string& path, const char* flag,
                                   double given, double def) {
    if (!std::isnan(given)) {
      set(path, NumberValue(given), absl::StrCat("--", flag), flag);
    } else {
      set(path, NumberValue(def), absl::StrCat("--", flag, " (default)"), "");
    }
  };
  if (in.per_device_train_batch_size > 0) {
    set("train_micro_batch_size_per_gpu",
        NumberValue(in.per_device_train_batch_size),
        "--per_device_train_batch_size", "per_device_train_batch_size");
  } else {
    derive("train_micro_batch_size_per_gpu");
  }
  if (in.gradient_accumulation_steps > 0) {
    set("gradient_accumulation_steps",
        NumberValue(in.gradient_accumulation_steps),
        "--gradient_accumulation_steps", "gradient_accumulation_steps");
  } else {
    derive("gradient_accumulation_steps");
  }
  if (in.per_device_train_batch_size > 0 &&
      in.gradient_accumulation_steps > 0) {
    // Hugging Face's rule (trainer_config_process): from its arguments, not
    // the file's keys; a file without an accumulation key then derives it.
    set("train_batch_size",
        NumberValue(static_cast<double>(in.per_device_train_batch_size) *
                    in.gradient_accumulation_steps * world_size),
        "--per_device_train_batch_size x --gradient_accumulation_steps x "
        "workers",
        "per_device_train_batch_size,gradient_accumulation_steps");
  } else {
    derive("train_batch_size");
  }
  derive("zeroshard.servers");  // the launcher decides
  if (!std::isnan(in.learning_rate)) {
    set("optimizer.params.lr", NumberValue(in.learning_rate), "--learning_rate",
        "learning_rate");
    set("scheduler.params.warmup_max_lr", NumberValue(in.learning_rate),
        "--learning_rate", "learning_rate");
  } else {
    missing("optimizer.params.lr", "give --learning_rate");
    // Parse() fills warmup_max_lr from optimizer.params.lr instead.
    missing("scheduler.params.warmup_max_lr",
            "give --learning_rate (or a number for optimizer.params.lr)");
  }
  {
    const bool b1 = !std::isnan(in.adam_beta1), b2 = !std::isnan(in.adam_beta2);
    Value betas;
    betas.mutable_list_value()->add_values()->set_number_value(
        b1 ? in.adam_beta1 : 0.9);
    betas.mutable_list_value()->add_values()->set_number_value(
        b2 ? in.adam_beta2 : 0.999);
    std::string flags = b1 && b2 ? "adam_beta1,adam_beta2"
                        : b1     ? "adam_beta1"
                        : b2     ? "adam_beta2"
                                 : "";
    set("optimizer.params.betas", std::move(betas),
        absl::StrCat(b1 ? "--adam_beta1" : "--adam_beta1 (default)", ", ",
                     b2 ? "--adam_beta2" : "--adam_beta2 (default)"),
        flags);
  }
  flag_or_default("optimizer.params.eps", "adam_epsilon", in.adam_epsilon,
                  1e-8);
  flag_or_default("optimizer.params.weight_decay", "weight_decay",
                  in.weight_decay, 0.0);
  flag_or_default("gradient_clipping", "max_grad_norm", in.max_grad_norm, 1.0);
  flag_or_default(
      "scheduler.params.warmup_num_steps", "warmup_steps",
      in.warmup_steps >= 0 ? static_cast<double>(in.warmup_steps) : NAN, 0.0);
  set("scheduler.params.warmup_min_lr", NumberValue(0.0), "0 (as Hugging Face)",
      "");
  if (in.steps > 0) {
    set("scheduler.params.total_num_steps", NumberValue(in.steps), "--steps",
        "");
  } else {
    missing("scheduler.params.total_num_steps", "give --steps");
  }
  for (const char* section : {"fp16", "bf16", "bfloat16"}) {
    const std::string path = absl::StrCat(section, ".enabled");
    if (in.precision.empty()) {
      missing(path, "give --precision=fp32, fp16 or bf16");
      continue;
    }
    const bool on = (in.precision == "fp16" && section[0] == 'f') ||
                    (in.precision == "bf16" && section[0] == 'b');
    set(path, BoolValue(on), "--precision=" + in.precision, "precision");
  }
  const int64_t h = in.hidden_size;
  const std::string model = absl::StrCat("model (hidden size ", h, " from ",
                                         in.hidden_size_from, ")");
  const struct {
    const char* key;
    const char* rule;
    double value;
  } sized[] = {
      {"reduce_bucket_size", "hidden^2", static_cast<double>(h * h)},
      {"stage3_prefetch_bucket_size", "0.9 hidden^2",
       std::floor(0.9 * static_cast<double>(h * h))},
      {"stage3_param_persistence_threshold", "10 hidden",
       static_cast<double>(10 * h)},
  };
  for (const auto& z : sized) {
    const std::string path = absl::StrCat("zero_optimization.", z.key);
    if (h > 0) {
      set(path, NumberValue(z.value), absl::StrCat(model, ": ", z.rule), "");
    } else {
      missing(path,
              absl::StrCat("it is ", z.rule,
                           " of the model's hidden size, which is not known "
                           "here (give the model: zeroshard train's "
                           "--channels or --model_file, the C API's and "
                           "zeroshard.Config's hidden_size)"));
    }
  }
}

// Sets the resolved table's row of `path` (added if missing).
void Resolve(ReadLog* log, const std::string& path, std::string value,
             std::string source) {
  for (ResolvedKey& r : log->resolved) {
    if (r.key == path) {
      r.value = std::move(value);
      r.source = std::move(source);
      return;
    }
  }
  log->resolved.push_back({path, std::move(value), std::move(source)});
}

// DeepSpeed's dynamic fp16 loss scaler depends on the stage and on whether
// the fp16 section names a scaler key (runtime/config.py,
// get_dynamic_loss_scale_args): at ZeRO stages 1-3 without one it is
// DynamicLossScaler() with its own defaults, 2^32 and no hysteresis
// (fp16/loss_scaler.py); at stage 0 its FP16_Optimizer halves the scale at
// every overflow, no hysteresis (fp16/fused_optimizer.py; it also stays at
// the minimum scale where zeroshard's scaler stops the run, as stages 1-3
// do).
void MatchDeepSpeedScaler(const google::protobuf::Struct& root,
                          EngineConfig* config, ReadLog* log) {
  engine::LossScalerOptions& scaler = config->loss_scaler;
  if (config->precision != engine::Precision::kFp16 || !scaler.dynamic) return;
  bool named = false;
  auto fp16 = root.fields().find("fp16");
  if (fp16 != root.fields().end() && fp16->second.has_struct_value()) {
    for (const char* key :
         {"initial_scale_power", "loss_scale_window", "min_loss_scale",
          "hysteresis", "consecutive_hysteresis"}) {
      named = named || fp16->second.struct_value().fields().count(key) != 0;
    }
  }
  if (config->zero.stage == 0) {
    if (scaler.hysteresis > 1 && fp16 != root.fields().end() &&
        fp16->second.struct_value().fields().count("hysteresis") != 0) {
      log->warnings.push_back(absl::StrCat(
          "fp16.hysteresis (", scaler.hysteresis,
          ") is not used at zero_optimization.stage 0: DeepSpeed's stage-0 "
          "fp16 optimizer halves the loss scale at every overflow"));
    }
    scaler.hysteresis = 1;
    Resolve(log, "fp16.hysteresis", "1",
            "stage 0 (DeepSpeed's FP16_Optimizer has none)");
  } else if (!named) {
    scaler.initial_scale = std::ldexp(1.0, 32);
    scaler.hysteresis = 1;
    const std::string why =
        "default (DeepSpeed's DynamicLossScaler at stages 1-3 when fp16 "
        "names no scaler key)";
    Resolve(log, "fp16.initial_scale_power", "32", why);
    Resolve(log, "fp16.hysteresis", "1", why);
  }
}

// A config without an optimizer section (DeepSpeed-Chat's, Hugging Face's
// autotuning ones: their scripts pass an optimizer object). DeepSpeed has
// no default optimizer; Hugging Face's Trainer then makes AdamW from its
// arguments: so here the optimizer flags given fill its keys, and a
// warning says what runs. Returns whether the section was missing.
bool DefaultOptimizer(const AutoInputs& in, google::protobuf::Struct* root) {
  auto it = root->fields().find("optimizer");
  if (it != root->fields().end() &&
      it->second.kind_case() != google::protobuf::Value::kNullValue) {
    // A section without a type is no optimizer to DeepSpeed either
    // (runtime/config.py): the same warning, its params still read.
    return it->second.has_struct_value() &&
           it->second.struct_value().fields().count("type") == 0;
  }
  google::protobuf::Struct& params = *(*(*root->mutable_fields())["optimizer"]
                                            .mutable_struct_value()
                                            ->mutable_fields())["params"]
                                          .mutable_struct_value();
  const std::pair<const char*, bool> keys[] = {
      {"lr", !std::isnan(in.learning_rate)},
      {"betas", !std::isnan(in.adam_beta1) || !std::isnan(in.adam_beta2)},
      {"eps", !std::isnan(in.adam_epsilon)},
      {"weight_decay", !std::isnan(in.weight_decay)},
  };
  for (const auto& [key, given] : keys) {
    if (given) (*params.mutable_fields())[key].set_string_value("auto");
  }
  return true;
}

// DeepSpeed's legacy spellings, rewritten in `root` with a warning each:
// "zero_optimization": true / false (stage 1 / 0; zero/config.py,
// read_zero_config_deprecated) and zero_optimization.cpu_offload_param
// (offload_param.device "cpu").
void ReadLegacyZero(google::protobuf::Struct* root,
                    std::vector<std::string>* warnings) {
  auto* fields = root->mutable_fields();
  auto it = fields->find("zero_optimization");
  if (it == fields->end()) return;
  google::protobuf::Value& zero = it->second;
  if (zero.kind_case() == google::protobuf::Value::kBoolValue) {
    const int stage = zero.bool_value() ? 1 : 0;
    warnings->push_back(absl::StrCat(
        "zero_optimization: ", zero.bool_value() ? "true" : "false",
        " is DeepSpeed's legacy form of {\"stage\": ", stage,
        "}; read as that"));
    (*zero.mutable_struct_value()->mutable_fields())["stage"].set_number_value(
        stage);
    return;
  }
  if (!zero.has_struct_value()) return;
  auto* z = zero.mutable_struct_value()->mutable_fields();
  auto legacy = z->find("cpu_offload_param");
  if (legacy == z->end()) return;
  if (legacy->second.kind_case() == google::protobuf::Value::kBoolValue) {
    if (legacy->second.bool_value() && z->count("offload_param") == 0) {
      (*(*z)["offload_param"]
            .mutable_struct_value()
            ->mutable_fields())["device"]
          .set_string_value("cpu");
      warnings->push_back(
          "zero_optimization.cpu_offload_param: deprecated; read as "
          "offload_param.device \"cpu\", as DeepSpeed reads it");
    } else if (legacy->second.bool_value()) {
      warnings->push_back(
          "zero_optimization.cpu_offload_param: deprecated; offload_param "
          "decides");
    }
    z->erase("cpu_offload_param");
  }
}

// DeepSpeed's zero_optimization takes each stage3_* key also under its
// field name (DeepSpeedZeroConfig's pydantic aliases, populate_by_name):
// "max_reuse_distance" is "stage3_max_reuse_distance". The field names are
// rewritten in `root` to the stage3_ spelling, which the rest of the
// reader (and the "auto" fills, and the resolved table) use; both
// spellings with different values are an error.
absl::Status ReadZeroAliases(google::protobuf::Struct* root) {
  auto* fields = root->mutable_fields();
  auto it = fields->find("zero_optimization");
  if (it == fields->end() || !it->second.has_struct_value()) {
    return absl::OkStatus();
  }
  static const char* const kFieldNames[] = {
      "prefetch_bucket_size",         "param_persistence_threshold",
      "model_persistence_threshold",  "max_live_parameters",
      "max_reuse_distance",           "gather_16bit_weights_on_model_save",
      "module_granularity_threshold", "use_all_reduce_for_fetch_params",
      "allgather_sequential"};
  auto* z = it->second.mutable_struct_value()->mutable_fields();
  for (const char* name : kFieldNames) {
    auto short_it = z->find(name);
    if (short_it == z->end()) continue;
    const std::string alias = absl::StrCat("stage3_", name);
    auto long_it = z->find(alias);
    if (long_it != z->end()) {
      const std::string a = internal::DescribeValue(short_it->second);
      const std::string b = internal::DescribeValue(long_it->second);
      if (a != b) {
        return absl::InvalidArgumentError(absl::StrCat(
            "zero_optimization.", name, " (", a, ") and zero_optimization.",
            alias, " (", b,
            ") are one DeepSpeed setting under two names and differ: give "
            "one"));
      }
    } else {
      (*z)[alias] = short_it->second;
    }
    z->erase(name);
  }
  return absl::OkStatus();
}

const char* ScheduleName(engine::LrScheduleType type) {
  static const char* const kSchedules[] = {"constant lr", "WarmupLR",
                                           "WarmupDecayLR", "WarmupCosineLR"};
  return kSchedules[static_cast<int>(type)];
}

// WarmupLR and WarmupDecayLR train at their own range (warmup_min_lr to
// warmup_max_lr), not at the optimizer's lr.
bool RateIsItsRange(const engine::LrSchedule& s) {
  return s.type == engine::LrScheduleType::kWarmupLR ||
         s.type == engine::LrScheduleType::kWarmupDecayLR;
}

// " (the rate follows the scheduler's WarmupLR from 0 to 0.001)" for those
// schedules; "" otherwise.
std::string ScheduleNote(const engine::LrSchedule& s) {
  if (!RateIsItsRange(s)) return "";
  return absl::StrCat(" (the rate follows the scheduler's ",
                      ScheduleName(s.type), " from ", s.warmup_min_lr, " to ",
                      s.warmup_max_lr, ")");
}

// The source of a resolved key ("" when it was not read).
std::string SourceOf(const ReadLog& log, absl::string_view key) {
  for (const ResolvedKey& r : log.resolved) {
    if (r.key == key) return r.source;
  }
  return "";
}

// --learning_rate filling an "auto" warmup_max_lr while the file gives
// optimizer.params.lr another number: the schedule peaks at the flag's.
void WarnPeakFromFlag(const EngineConfig& config, ReadLog& log) {
  const engine::LrSchedule& s = config.lr_schedule;
  if (!RateIsItsRange(s) || s.warmup_max_lr == config.optimizer.lr ||
      SourceOf(log, "optimizer.params.lr") != "file" ||
      !absl::StartsWith(SourceOf(log, "scheduler.params.warmup_max_lr"),
                        "auto←--learning_rate")) {
    return;
  }
  log.warnings.push_back(absl::StrCat(
      "scheduler.params.warmup_max_lr is \"auto\", filled by --learning_rate "
      "(",
      s.warmup_max_lr, "), while optimizer.params.lr is ", config.optimizer.lr,
      " in the file: the schedule peaks at ", s.warmup_max_lr,
      " (write one number in both, or \"auto\" in both)"));
}

// A warning for each flag that was given but filled no "auto".
void WarnUnusedFlags(const ReadLog& log, std::vector<std::string>* warnings) {
  std::set<std::string> given, used;
  for (const auto& [path, fill] : log.fills) {
    for (absl::string_view flag :
         absl::StrSplit(fill.flag, ',', absl::SkipEmpty())) {
      given.insert(std::string(flag));
      if (fill.used) used.insert(std::string(flag));
    }
  }
  for (const std::string& flag : given) {
    if (used.count(flag) != 0) continue;
    std::vector<std::string> keys;
    for (const auto& [path, fill] : log.fills) {
      if (absl::StrContains(absl::StrCat(",", fill.flag, ","),
                            absl::StrCat(",", flag, ","))) {
        keys.push_back(path);
      }
    }
    warnings->push_back(absl::StrCat(
        "--", flag, " is not used: it fills only \"auto\" values of ",
        absl::StrJoin(keys, ", "),
        ", and the config has none of them as \"auto\" (its own values, or "
        "the defaults, stand)"));
  }
}

// The error for the "auto" values nothing fills ("<path>: <advice>" each,
// in reading order): one as "<path>: \"auto\" with nothing to fill it:
// <advice>"; several in one line, the keys that the same input fills
// sharing it (an advice "<detail> (give X)" shares "give X", each key
// keeping its detail).
absl::Status UnfilledError(const std::vector<std::string>& unfilled) {
  if (unfilled.size() == 1) {
    const std::string& u = unfilled[0];
    const size_t colon = u.find(": ");
    return absl::InvalidArgumentError(
        absl::StrCat(u.substr(0, colon), ": \"auto\" with nothing to fill it",
                     u.substr(colon)));
  }
  struct Group {
    std::string remedy;
    std::vector<std::string> keys;  // each with its detail, if any
  };
  std::vector<Group> groups;
  for (const std::string& u : unfilled) {
    const size_t colon = u.find(": ");
    std::string key = u.substr(0, colon), advice = u.substr(colon + 2);
    const size_t give = advice.rfind(" (give ");
    if (give != std::string::npos && advice.back() == ')') {
      key = absl::StrCat(key, " (", advice.substr(0, give), ")");
      advice = advice.substr(give + 2, advice.size() - give - 3);
    }
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const Group& g) { return g.remedy == advice; });
    if (it == groups.end()) {
      groups.push_back(Group{std::move(advice), {std::move(key)}});
    } else {
      it->keys.push_back(std::move(key));
    }
  }
  std::vector<std::string> entries;
  for (const Group& g : groups) {
    std::string keys = g.keys.back();
    if (g.keys.size() > 1) {
      keys = absl::StrCat(absl::StrJoin(g.keys.begin(), g.keys.end() - 1, ", "),
                          " and ", keys);
    }
    entries.push_back(absl::StrCat(keys, ": ", g.remedy));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("\"auto\" with nothing to fill it, in ", unfilled.size(),
                   " keys: ", absl::StrJoin(entries, "; ")));
}

absl::StatusOr<EngineConfig> Parse(absl::string_view json, int world_size,
                                   const AutoInputs& inputs, ReadLog* log) {
  ZS_RETURN_IF_ERROR(ValidateAutoInputs(inputs));
  ZS_ASSIGN_OR_RETURN(google::protobuf::Struct root_struct,
                      internal::ParseJsonObject(json));
  AddFills(inputs, world_size, log);
  log->steps = inputs.steps;
  EngineConfig config;
  const bool no_optimizer = DefaultOptimizer(inputs, &root_struct);
  ReadLegacyZero(&root_struct, &log->warnings);
  ZS_RETURN_IF_ERROR(ReadZeroAliases(&root_struct));
  ObjectReader root(&root_struct, "", log);
  ZS_RETURN_IF_ERROR(ParseBatch(root, world_size, &config.batch));
  ZS_ASSIGN_OR_RETURN(
      config.gradient_clipping,
      root.Number("gradient_clipping", 0.0, ObjectReader::Bound::kNonNegative));
  ZS_RETURN_IF_ERROR(internal::ParseOptimizer(root, &config.optimizer));
  if (std::isnan(inputs.learning_rate)) {
    AutoFill& max_lr = log->fills["scheduler.params.warmup_max_lr"];
    max_lr.missing.clear();
    max_lr.value = NumberValue(config.optimizer.lr);
    max_lr.source = "optimizer.params.lr";
  }
  ZS_RETURN_IF_ERROR(internal::ParseScheduler(root, config.optimizer.lr,
                                              &config.lr_schedule, log));
  WarnPeakFromFlag(config, *log);
  if (no_optimizer) {
    const AdamWConfig& o = config.optimizer;
    log->warnings.push_back(absl::StrCat(
        "the config has no optimizer section, or one without a type (DeepSpeed "
        "builds no optimizer then): the "
        "servers run AdamW with lr ",
        o.lr,
        SourceOf(*log, "optimizer.params.lr") == "default"
            ? " (the default; --learning_rate sets it)"
        : std::isnan(inputs.learning_rate) ? ""
                                           : " (--learning_rate)",
        ", betas (", o.beta1, ", ", o.beta2, "), eps ", o.eps,
        ", weight decay ", o.weight_decay, ScheduleNote(config.lr_schedule),
        "; give the config an optimizer section with its type (or Python's "
        "initialize an optimizer) to choose"));
  }
  ZS_RETURN_IF_ERROR(internal::ParsePrecision(root, &config));
  ZS_RETURN_IF_ERROR(internal::ParseTorchAutocast(root, &config));
  ZS_RETURN_IF_ERROR(internal::ParseZero(root, &config.zero, log));
  MatchDeepSpeedScaler(root_struct, &config, log);
  ZS_RETURN_IF_ERROR(internal::ParseAio(root, &config.zero.nvme, log));
  ZS_RETURN_IF_ERROR(internal::ParseZeroShard(root, &config.zeroshard));
  ZS_RETURN_IF_ERROR(internal::ParseMonitors(root, &config.monitor, log));
  ZS_RETURN_IF_ERROR(internal::ReadUnusedTopLevel(root));
  root.WarnUnknown();
  if (!log->errors.empty()) return absl::InvalidArgumentError(log->errors[0]);
  WarnUnusedFlags(*log, &log->warnings);
  static const char* const kPrecisionNames[] = {"fp32", "fp16", "bf16"};
  const char* precision = kPrecisionNames[static_cast<int>(config.precision)];
  if (!inputs.precision.empty() && inputs.precision != precision) {
    log->warnings.push_back(
        absl::StrCat("--precision=", inputs.precision,
                     " is not what the config gives (", precision,
                     "): it fills only \"auto\" fp16.enabled and bf16.enabled, "
                     "and the config's sections decide"));
  }
  const std::string advice = NvmeAdvice(config);
  if (!advice.empty()) log->warnings.push_back(advice);
  config.auto_keys = log->auto_keys;
  config.resolved = log->resolved;
  return config;
}

}  // namespace

absl::StatusOr<BatchSizes> ResolveBatchSizes(int64_t train, int64_t micro,
                                             int64_t gas, int world_size) {
  if (world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("world size must be >= 1, got ", world_size));
  }
  const int64_t w = world_size;
  // Every batch size fits the engine's int (and every product below
  // int64_t).
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  const __int128 samples = static_cast<__int128>(std::max<int64_t>(micro, 1)) *
                           std::max<int64_t>(gas, 1) * w;
  if (train > kMax || micro > kMax || gas > kMax || samples > kMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch sizes above ", kMax, ": train_batch_size ", train,
                     ", train_micro_batch_size_per_gpu ", micro,
                     ", gradient_accumulation_steps ", gas, ", world size ", w,
                     " (-1: not given)"));
  }
  BatchSizes b{train, micro, gas, world_size};
  const auto not_multiple = [&](absl::string_view of, int64_t divisor) {
    return absl::InvalidArgumentError(absl::StrCat(
        "train_batch_size (", train, ") must be a multiple of ", of, divisor));
  };
  if (train > 0 && micro > 0 && gas > 0) {
    if (train != micro * gas * w) {
      return absl::InvalidArgumentError(
          absl::StrCat("train_batch_size (", train,
                       ") must equal "
                       "train_micro_batch_size_per_gpu (",
                       micro,
                       ") * "
                       "gradient_accumulation_steps (",
                       gas, ") * world size (", w, ") = ", micro * gas * w));
    }
  } else if (train > 0 && micro > 0) {
    if (train % (micro * w) != 0) {
      return not_multiple(absl::StrCat("train_micro_batch_size_per_gpu (",
                                       micro, ") * world size (", w, ") = "),
                          micro * w);
    }
    b.gradient_accumulation_steps = train / (micro * w);
  } else if (train > 0 && gas > 0) {
    if (train % (gas * w) != 0) {
      return not_multiple(absl::StrCat("gradient_accumulation_steps (", gas,
                                       ") * world size (", w, ") = "),
                          gas * w);
    }
    b.micro_batch_per_worker = train / (gas * w);
  } else if (micro > 0) {
    if (gas <= 0) b.gradient_accumulation_steps = 1;
    b.train_batch_size = micro * b.gradient_accumulation_steps * w;
  } else if (train > 0) {
    if (train % w != 0) return not_multiple("world size ", w);
    b.gradient_accumulation_steps = 1;
    b.micro_batch_per_worker = train / w;
  } else {
    return absl::InvalidArgumentError(
        "train_batch_size or train_micro_batch_size_per_gpu must be given");
  }
  return b;
}

absl::StatusOr<EngineConfig> ParseDeepSpeedConfig(
    absl::string_view json, int world_size,
    std::vector<std::string>* warnings) {
  return ParseDeepSpeedConfig(json, world_size, AutoInputs{}, warnings);
}

absl::StatusOr<EngineConfig> ParseDeepSpeedConfig(
    absl::string_view json, int world_size, const AutoInputs& inputs,
    std::vector<std::string>* warnings) {
  ReadLog log;
  absl::StatusOr<EngineConfig> config = Parse(json, world_size, inputs, &log);
  // "auto" values that nothing fills come first, all in one error (the
  // reader went on as if they were absent, so what else it found may stem
  // from that).
  if (!log.unfilled.empty()) config = UnfilledError(log.unfilled);
  if (!log.unfilled.empty()) log.warnings.resize(log.warnings_before_unfilled);
  if (warnings != nullptr) {
    for (std::string& w : log.warnings) warnings->push_back(std::move(w));
  }
  return config;
}

absl::StatusOr<EngineConfig> ParseDeepSpeedConfigFile(
    const std::string& path, int world_size, std::vector<std::string>* warnings,
    Env* env) {
  return ParseDeepSpeedConfigFile(path, world_size, AutoInputs{}, warnings,
                                  env);
}

absl::StatusOr<EngineConfig> ParseDeepSpeedConfigFile(
    const std::string& path, int world_size, const AutoInputs& inputs,
    std::vector<std::string>* warnings, Env* env) {
  ZS_ASSIGN_OR_RETURN(const std::string text, ReadSmallFile(env, path));
  std::vector<std::string> file_warnings;
  absl::StatusOr<EngineConfig> config =
      ParseDeepSpeedConfig(text, world_size, inputs, &file_warnings);
  if (warnings != nullptr) {
    for (const std::string& w : file_warnings) {
      warnings->push_back(absl::StrCat(path, ": ", w));
    }
  }
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(path, ": ", config.status().message()));
  }
  return config;
}

std::vector<std::string> NvmeServerFlags(const EngineConfig& config) {
  const NvmeConfig& n = config.zero.nvme;
  if (!n.enabled) return {};
  std::vector<std::string> flags = {"--storage=nvme",
                                    "--nvme_path=" + n.nvme_path};
  if (n.block_size >= 0) {
    flags.push_back(absl::StrCat("--aio_block_size=", n.block_size));
  }
  if (n.queue_depth >= 0) {
    flags.push_back(absl::StrCat("--aio_queue_depth=", n.queue_depth));
  }
  if (n.intra_op_parallelism >= 0) {
    flags.push_back(
        absl::StrCat("--aio_intra_op_parallelism=", n.intra_op_parallelism));
  }
  return flags;
}

std::string NvmeAdvice(const EngineConfig& config) {
  if (!config.zero.nvme.enabled) return "";
  return absl::StrCat(
      config.zero.nvme.requested_by,
      " \"nvme\": the shard servers keep the optimizer state on NVMe when "
      "each runs with ",
      absl::StrJoin(NvmeServerFlags(config), " "),
      " (zeroshard train passes these to the servers it starts)");
}

std::string DescribeEngineConfig(const EngineConfig& c) {
  static const char* const kPrecisions[] = {"fp32", "fp16", "bf16"};
  std::string out = absl::StrCat("stage ", c.zero.stage);
  if (c.zero.offload_param == OffloadDevice::kServer) {
    absl::StrAppend(&out, " (offload_param=server)");
  }
  absl::StrAppend(&out, ", ", kPrecisions[static_cast<int>(c.precision)]);
  if (c.precision == engine::Precision::kFp16) {
    absl::StrAppend(&out, c.loss_scaler.dynamic ? " (dynamic loss scale)"
                                                : " (static loss scale)");
  }
  absl::StrAppend(&out, ", batch ", c.batch.train_batch_size, " = ",
                  c.batch.micro_batch_per_worker, " x ",
                  c.batch.gradient_accumulation_steps, " x ",
                  c.batch.world_size, " workers, AdamW lr ", c.optimizer.lr,
                  " wd ", c.optimizer.weight_decay,
                  c.optimizer.bias_correction ? "" : " (no bias correction)",
                  ", ", ScheduleName(c.lr_schedule.type));
  if (RateIsItsRange(c.lr_schedule)) {
    absl::StrAppend(&out, " ", c.lr_schedule.warmup_min_lr, " to ",
                    c.lr_schedule.warmup_max_lr);
  }
  if (c.gradient_clipping > 0) {
    absl::StrAppend(&out, ", clip ", c.gradient_clipping);
  }
  if (c.zeroshard.num_servers > 0) {
    absl::StrAppend(&out, ", ", c.zeroshard.num_servers, " servers");
  }
  if (c.zeroshard.server_aggregation) {
    absl::StrAppend(&out, ", server-side aggregation");
  }
  if (c.zeroshard.delayed_parameter_update) {
    absl::StrAppend(&out, ", delayed parameter update from step ",
                    c.zeroshard.delayed_update_warmup_steps);
  }
  return out;
}

}  // namespace zeroshard::config
