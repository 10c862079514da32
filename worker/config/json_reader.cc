#include "worker/config/json_reader.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/edit_distance.h"
#include "common/status_macros.h"

namespace zeroshard::config::internal {
namespace {

using google::protobuf::Value;

bool IsAuto(const Value& v) {
  return v.kind_case() == Value::kStringValue && v.string_value() == "auto";
}

// "a non-negative integer", "an integer in [2, 7]", ...
std::string IntegerWhat(int64_t min, int64_t max) {
  if (max == kMaxExactInt) {
    if (min == 0) return "a non-negative integer";
    if (min == 1) return "a positive integer";
    return absl::StrCat("an integer >= ", min);
  }
  return absl::StrCat("an integer in [", min, ", ", max, "]");
}

// The keys "auto" may stand for, for the error about any other.
std::string FillableKeys(const ReadLog& log) {
  std::vector<std::string> keys;
  for (const auto& [path, fill] : log.fills) keys.push_back(path);
  return absl::StrJoin(keys, ", ");
}

std::string NumberText(double d) {
  Value v;
  v.set_number_value(d);
  return DescribeValue(v);
}

}  // namespace

std::string DescribeValue(const Value& value) {
  switch (value.kind_case()) {
    case Value::kNumberValue: {
      const double d = value.number_value();
      if (d == std::trunc(d) && std::fabs(d) < 1e15) {
        return absl::StrCat(static_cast<int64_t>(d));
      }
      return absl::StrCat(d);
    }
    case Value::kStringValue:
      return absl::StrCat("\"", value.string_value(), "\"");
    case Value::kBoolValue:
      return value.bool_value() ? "true" : "false";
    case Value::kStructValue:
      return "an object";
    case Value::kListValue: {
      std::string out = "[";
      for (const Value& item : value.list_value().values()) {
        absl::StrAppend(&out, out.size() > 1 ? ", " : "", DescribeValue(item));
      }
      return out + "]";
    }
    default:
      return "null";
  }
}

ObjectReader::ObjectReader(const google::protobuf::Struct* object,
                           std::string path, ReadLog* log)
    : object_(object), path_(std::move(path)), log_(log) {}

std::string ObjectReader::PathOf(absl::string_view key) const {
  return path_.empty() ? std::string(key) : absl::StrCat(path_, ".", key);
}

void ReadLog::AddUnfilled(std::string entry) {
  if (unfilled.empty()) warnings_before_unfilled = warnings.size();
  if (std::find(unfilled.begin(), unfilled.end(), entry) == unfilled.end()) {
    unfilled.push_back(std::move(entry));
  }
}

bool ObjectReader::Unfilled(absl::string_view key) const {
  const std::string prefix = absl::StrCat(PathOf(key), ": ");
  return std::any_of(
      log_->unfilled.begin(), log_->unfilled.end(),
      [&](const std::string& u) { return absl::StartsWith(u, prefix); });
}

absl::Status ObjectReader::Error(absl::string_view key,
                                 absl::string_view message) const {
  return absl::InvalidArgumentError(absl::StrCat(PathOf(key), ": ", message));
}

absl::Status ObjectReader::MustBe(absl::string_view key, absl::string_view what,
                                  const Value& got) const {
  return Error(key,
               absl::StrCat("must be ", what, ", got ", DescribeValue(got)));
}

const Value* ObjectReader::Raw(absl::string_view key) {
  known_.insert(std::string(key));
  if (object_ == nullptr) return nullptr;
  auto it = object_->fields().find(std::string(key));
  if (it == object_->fields().end()) return nullptr;
  if (it->second.kind_case() == Value::kNullValue) return nullptr;
  return &it->second;
}

absl::StatusOr<ObjectReader::Got> ObjectReader::Get(absl::string_view key) {
  const Value* v = Raw(key);
  if (v == nullptr) return Got{nullptr, "default"};
  if (!IsAuto(*v)) return Got{v, "file"};
  const std::string path = PathOf(key);
  log_->auto_keys.push_back(path);
  auto it = log_->fills.find(path);
  if (it == log_->fills.end()) {
    return Error(key, absl::StrCat("is \"auto\", which zeroshard fills only "
                                   "for ",
                                   FillableKeys(*log_), "; write a value"));
  }
  AutoFill& fill = it->second;
  if (!fill.missing.empty()) {
    log_->AddUnfilled(absl::StrCat(path, ": ", fill.missing));
    return Got{nullptr, "default"};  // read on as if absent
  }
  fill.used = true;
  if (fill.derive) return Got{nullptr, ""};
  return Got{&fill.value, "auto←" + fill.source};
}

void ObjectReader::Note(absl::string_view key, std::string value,
                        std::string source) {
  if (source.empty()) return;
  log_->resolved.push_back(
      ResolvedKey{PathOf(key), std::move(value), std::move(source)});
}

bool ObjectReader::Has(absl::string_view key) {
  const Value* v = Raw(key);
  return v != nullptr && !IsAuto(*v);
}

absl::StatusOr<int64_t> ObjectReader::Int(absl::string_view key, int64_t def,
                                          int64_t min, int64_t max) {
  ZS_ASSIGN_OR_RETURN(Got got, Get(key));
  const Value* v = got.value;
  if (v == nullptr) {
    Note(key, absl::StrCat(def), got.source);
    return def;
  }
  const double d = v->number_value();
  if (v->kind_case() != Value::kNumberValue || d != std::trunc(d) ||
      d < static_cast<double>(min) || d > static_cast<double>(max)) {
    return MustBe(key, IntegerWhat(min, max), *v);
  }
  Note(key, DescribeValue(*v), got.source);
  return static_cast<int64_t>(d);
}

absl::StatusOr<int64_t> ObjectReader::IntOrUnset(absl::string_view key,
                                                 int64_t min,
                                                 std::string* source,
                                                 int64_t max) {
  ZS_ASSIGN_OR_RETURN(Got got, Get(key));
  if (source != nullptr) *source = got.value == nullptr ? "" : got.source;
  const Value* v = got.value;
  if (v == nullptr) return -1;
  const double d = v->number_value();
  if (v->kind_case() != Value::kNumberValue || d != std::trunc(d) ||
      d < static_cast<double>(min) || d > static_cast<double>(max)) {
    return MustBe(key, IntegerWhat(min, max), *v);
  }
  return static_cast<int64_t>(d);
}

absl::StatusOr<double> ObjectReader::Number(absl::string_view key, double def,
                                            Bound bound) {
  ZS_ASSIGN_OR_RETURN(Got got, Get(key));
  const Value* v = got.value;
  if (v == nullptr) {
    Note(key, NumberText(def), got.source);
    return def;
  }
  const double d = v->number_value();
  const bool in_bound = bound == Bound::kAny ||
                        (bound == Bound::kNonNegative && d >= 0) ||
                        (bound == Bound::kPositive && d > 0);
  if (v->kind_case() != Value::kNumberValue || !std::isfinite(d) || !in_bound) {
    const char* what = bound == Bound::kAny           ? "a number"
                       : bound == Bound::kNonNegative ? "a non-negative number"
                                                      : "a positive number";
    return MustBe(key, what, *v);
  }
  Note(key, DescribeValue(*v), got.source);
  return d;
}

absl::StatusOr<std::vector<double>> ObjectReader::NumberArray(
    absl::string_view key, std::vector<double> def) {
  ZS_ASSIGN_OR_RETURN(Got got, Get(key));
  const Value* v = got.value;
  if (v == nullptr) {
    std::vector<std::string> items;
    for (double d : def) items.push_back(NumberText(d));
    Note(key, absl::StrCat("[", absl::StrJoin(items, ", "), "]"), got.source);
    return def;
  }
  const std::string what = absl::StrCat("an array of ", def.size(), " numbers");
  if (v->kind_case() != Value::kListValue ||
      v->list_value().values_size() != static_cast<int>(def.size())) {
    return MustBe(key, what, *v);
  }
  std::vector<double> out;
  for (const Value& item : v->list_value().values()) {
    if (item.kind_case() != Value::kNumberValue) return MustBe(key, what, *v);
    out.push_back(item.number_value());
  }
  Note(key, DescribeValue(*v), got.source);
  return out;
}

absl::StatusOr<bool> ObjectReader::Bool(absl::string_view key, bool def) {
  ZS_ASSIGN_OR_RETURN(Got got, Get(key));
  const Value* v = got.value;
  if (v == nullptr) {
    Note(key, def ? "true" : "false", got.source);
    return def;
  }
  if (v->kind_case() != Value::kBoolValue) {
    return MustBe(key, "true or false", *v);
  }
  Note(key, DescribeValue(*v), got.source);
  return v->bool_value();
}

absl::StatusOr<std::string> ObjectReader::String(absl::string_view key,
                                                 std::string def) {
  ZS_ASSIGN_OR_RETURN(Got got, Get(key));
  const Value* v = got.value;
  if (v == nullptr) {
    Note(key, absl::StrCat("\"", def, "\""), got.source);
    return def;
  }
  if (v->kind_case() != Value::kStringValue) {
    return MustBe(key, "a string", *v);
  }
  Note(key, DescribeValue(*v), got.source);
  return v->string_value();
}

absl::StatusOr<ObjectReader> ObjectReader::Object(absl::string_view key) {
  ZS_ASSIGN_OR_RETURN(Got got, Get(key));
  const Value* v = got.value;
  if (v == nullptr) return ObjectReader(nullptr, PathOf(key), log_);
  if (v->kind_case() != Value::kStructValue) {
    return MustBe(key, "an object", *v);
  }
  return ObjectReader(&v->struct_value(), PathOf(key), log_);
}

void ObjectReader::Ignore(absl::string_view key, absl::string_view why) {
  if (Raw(key) == nullptr) return;
  log_->warnings.push_back(absl::StrCat(
      PathOf(key), ": not used by zeroshard (", why, "); ignored"));
}

void ObjectReader::WarnUnknown() {
  if (object_ == nullptr) return;
  std::set<std::string> unknown;
  for (const auto& [key, value] : object_->fields()) {
    if (known_.count(key) == 0) unknown.insert(key);
  }
  for (const std::string& key : unknown) {
    // The nearest known key, if near enough to be a typo of it.
    const int limit = key.size() >= 8 ? 2 : key.size() >= 4 ? 1 : 0;
    std::string nearest;
    int best = limit + 1;
    for (const std::string& k : known_) {
      const int d = EditDistance(key, k);
      if (d < best || (d == 0 && k != key)) {
        best = d;
        nearest = k;
      }
    }
    if (!nearest.empty() && best <= limit) {
      log_->errors.push_back(absl::StrCat("unknown key ", PathOf(key),
                                          " (did you mean ", PathOf(nearest),
                                          "?)"));
      continue;
    }
    log_->warnings.push_back(
        absl::StrCat("unknown key ", PathOf(key), " ignored"));
  }
}

}  // namespace zeroshard::config::internal
