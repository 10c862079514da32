#include "worker/config/ds_config.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "worker/config/ds_config_sections.h"
#include "worker/config/json_reader.h"

namespace zeroshard::config {
namespace {

using internal::ObjectReader;
using internal::ReadLog;

absl::Status ParseBatch(ObjectReader& root, int world_size, BatchSizes* out) {
  ZS_ASSIGN_OR_RETURN(int64_t train, root.IntOrUnset("train_batch_size", 1));
  ZS_ASSIGN_OR_RETURN(int64_t micro,
                      root.IntOrUnset("train_micro_batch_size_per_gpu", 1));
  ZS_ASSIGN_OR_RETURN(int64_t gas,
                      root.IntOrUnset("gradient_accumulation_steps", 1));
  ZS_ASSIGN_OR_RETURN(*out, ResolveBatchSizes(train, micro, gas, world_size));
  return absl::OkStatus();
}

// Line and column of protobuf's JSON error. Its message is "<reason>\n
// <segment of the input>\n<spaces>^"; the position is found by locating the
// segment in the input (given up when the segment occurs twice).
absl::Status JsonSyntaxError(absl::string_view json, absl::string_view error) {
  if (absl::StrContains(error, "Root element must be a message")) {
    return absl::InvalidArgumentError("the config must be a JSON object");
  }
  const size_t first = error.find('\n');
  const size_t last = error.rfind('\n');
  if (first == absl::string_view::npos || first == last) {
    return absl::InvalidArgumentError(absl::StrCat("invalid JSON: ", error));
  }
  const absl::string_view reason = error.substr(0, first);
  const absl::string_view segment = error.substr(first + 1, last - first - 1);
  const size_t caret = error.size() - last - 2;  // spaces before '^'
  size_t at = json.find(segment);
  if (segment.empty()) at = json.size() - std::min(json.size(), caret);
  if (at == absl::string_view::npos ||
      (!segment.empty() &&
       json.find(segment, at + 1) != absl::string_view::npos)) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid JSON: ", reason, " near \"", segment, "\""));
  }
  const size_t offset = std::min(json.size(), at + caret);
  const size_t line_start = json.substr(0, offset).rfind('\n');
  const size_t line = 1 + std::count(json.begin(), json.begin() + offset, '\n');
  const size_t column =
      line_start == absl::string_view::npos ? offset + 1 : offset - line_start;
  return absl::InvalidArgumentError(absl::StrCat(
      "invalid JSON at line ", line, ", column ", column, ": ", reason));
}

absl::StatusOr<EngineConfig> Parse(absl::string_view json, int world_size,
                                   ReadLog* log) {
  google::protobuf::Struct root_struct;
  const auto parsed = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), &root_struct);
  if (!parsed.ok()) {
    const std::string message(parsed.message());
    if (absl::StrContains(message, "Repeated map key")) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid JSON: duplicate key (", message, ")"));
    }
    return JsonSyntaxError(json, message);
  }
  EngineConfig config;
  ObjectReader root(&root_struct, "", log);
  ZS_RETURN_IF_ERROR(ParseBatch(root, world_size, &config.batch));
  ZS_ASSIGN_OR_RETURN(
      config.gradient_clipping,
      root.Number("gradient_clipping", 0.0, ObjectReader::Bound::kNonNegative));
  ZS_RETURN_IF_ERROR(internal::ParseOptimizer(root, &config.optimizer));
  ZS_RETURN_IF_ERROR(internal::ParseScheduler(root, config.optimizer.lr,
                                              &config.lr_schedule, log));
  ZS_RETURN_IF_ERROR(internal::ParsePrecision(root, &config));
  ZS_RETURN_IF_ERROR(internal::ParseZero(root, &config.zero, log));
  ZS_RETURN_IF_ERROR(internal::ParseZeroShard(root, &config.zeroshard));
  ZS_RETURN_IF_ERROR(internal::ParseMonitors(root, &config.monitor, log));
  internal::IgnoreUnusedTopLevel(root);
  root.WarnUnknown();
  config.auto_keys = log->auto_keys;
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
  ReadLog log;
  absl::StatusOr<EngineConfig> config = Parse(json, world_size, &log);
  if (warnings != nullptr) {
    for (std::string& w : log.warnings) warnings->push_back(std::move(w));
  }
  return config;
}

absl::StatusOr<EngineConfig> ParseDeepSpeedConfigFile(
    const std::string& path, int world_size, std::vector<std::string>* warnings,
    Env* env) {
  ZS_ASSIGN_OR_RETURN(const std::string text, ReadSmallFile(env, path));
  std::vector<std::string> file_warnings;
  absl::StatusOr<EngineConfig> config =
      ParseDeepSpeedConfig(text, world_size, &file_warnings);
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
                  " wd ", c.optimizer.weight_decay, ", ",
                  kSchedules[static_cast<int>(c.lr_schedule.type)]);
  if (c.gradient_clipping > 0) {
    absl::StrAppend(&out, ", clip ", c.gradient_clipping);
  }
  if (c.zeroshard.num_servers > 0) {
    absl::StrAppend(&out, ", ", c.zeroshard.num_servers, " servers");
  }
  if (c.zeroshard.server_aggregation) {
    absl::StrAppend(&out, ", server-side aggregation");
  }
  return out;
}

}  // namespace zeroshard::config
