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
      return root.Error(
          "train_micro_batch_size_per_gpu",
          "\"auto\" with nothing to fill it: give "
          "--per_device_train_batch_size (or a train_batch_size in the "
          "config)");
    }
    return b.status();
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
void AddFills(const AutoInputs& in, ReadLog* log) {
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
  derive("train_batch_size");
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
        absl::StrJoin(keys, ", "), ", and the config gives none"));
  }
}

absl::StatusOr<EngineConfig> Parse(absl::string_view json, int world_size,
                                   const AutoInputs& inputs, ReadLog* log) {
  ZS_RETURN_IF_ERROR(ValidateAutoInputs(inputs));
  ZS_ASSIGN_OR_RETURN(google::protobuf::Struct root_struct,
                      internal::ParseJsonObject(json));
  AddFills(inputs, log);
  log->steps = inputs.steps;
  EngineConfig config;
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
  ZS_RETURN_IF_ERROR(internal::ParsePrecision(root, &config));
  ZS_RETURN_IF_ERROR(internal::ParseZero(root, &config.zero, log));
  ZS_RETURN_IF_ERROR(internal::ParseAio(root, &config.zero.nvme, log));
  ZS_RETURN_IF_ERROR(internal::ParseZeroShard(root, &config.zeroshard));
  ZS_RETURN_IF_ERROR(internal::ParseMonitors(root, &config.monitor, log));
  internal::IgnoreUnusedTopLevel(root);
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
  static const char* const kSchedules[] = {"constant lr", "WarmupLR",
                                           "WarmupDecayLR", "WarmupCosineLR"};
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
                  ", ", kSchedules[static_cast<int>(c.lr_schedule.type)]);
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
