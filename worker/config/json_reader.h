// Reads one JSON object of a config (parsed into a google.protobuf.Struct)
// key by key, naming every value by its full path ("zero_optimization.stage")
// and collecting warnings. Internal to ds_config.
//
// Every getter marks its key as known and treats an absent key, JSON null
// and the string "auto" alike: it returns the default ("auto" is logged in
// ReadLog::auto_keys). A value of the wrong type or out of range is
// INVALID_ARGUMENT "<path>: must be <what>, got <value>".
//
// Example:
//   ReadLog log;
//   ObjectReader zero(&root_struct, "zero_optimization", &log);
//   ZS_ASSIGN_OR_RETURN(int64_t stage, zero.Int("stage", 0, 0, 3));
//   zero.WarnUnknown();  // "unknown key zero_optimization.foo ignored"
//
// Not thread-safe; the readers of one config share its ReadLog.
#ifndef ZEROSHARD_WORKER_CONFIG_JSON_READER_H_
#define ZEROSHARD_WORKER_CONFIG_JSON_READER_H_

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/struct.pb.h"

namespace zeroshard::config::internal {

// The largest integer a JSON number (a double) holds exactly: 2^53.
inline constexpr int64_t kMaxExactInt = int64_t{1} << 53;

struct ReadLog {
  std::vector<std::string> warnings;
  std::vector<std::string> auto_keys;  // full paths, in reading order
};

// "500000000" for 5e8, "1.5", "\"text\"", "true", "null", "[0.9, 1.5]",
// "an object".
std::string DescribeValue(const google::protobuf::Value& value);

class ObjectReader {
 public:
  // `object` may be null (a section the config leaves out): every key is
  // then absent. `path` is "" for the root. `log` must outlive the reader.
  ObjectReader(const google::protobuf::Struct* object, std::string path,
               ReadLog* log);

  // "<path>.<key>", or "<key>" at the root.
  std::string PathOf(absl::string_view key) const;
  bool present() const { return object_ != nullptr; }

  // True if `key` holds a value other than null and "auto".
  bool Has(absl::string_view key);

  // An integral JSON number in [min, max] (5e8 is fine, 1.5 is not).
  absl::StatusOr<int64_t> Int(absl::string_view key, int64_t def, int64_t min,
                              int64_t max = kMaxExactInt);
  // Like Int(), but -1 when absent, null or "auto" (callers use min >= 0).
  absl::StatusOr<int64_t> IntOrUnset(absl::string_view key, int64_t min);
  // A finite JSON number within `bound`.
  enum class Bound { kAny, kNonNegative, kPositive };
  absl::StatusOr<double> Number(absl::string_view key, double def, Bound bound);
  // An array of exactly def.size() finite numbers.
  absl::StatusOr<std::vector<double>> NumberArray(absl::string_view key,
                                                  std::vector<double> def);
  absl::StatusOr<bool> Bool(absl::string_view key, bool def);
  absl::StatusOr<std::string> String(absl::string_view key, std::string def);
  // A nested object; a reader over nothing when absent or null.
  absl::StatusOr<ObjectReader> Object(absl::string_view key);
  // The value as it is (null when absent or null; "auto" is returned as
  // is), for values of several shapes.
  const google::protobuf::Value* Raw(absl::string_view key);

  // For a DeepSpeed key zeroshard does not use: if present, warns
  // "<path>: not used by zeroshard (<why>); ignored".
  void Ignore(absl::string_view key, absl::string_view why);

  // Warns "unknown key <path> ignored" for every key no call above named,
  // in sorted order.
  void WarnUnknown();

  // INVALID_ARGUMENT "<path of key>: <message>".
  absl::Status Error(absl::string_view key, absl::string_view message) const;

 private:
  // The value of `key`, or null when absent, null or "auto" (logged).
  const google::protobuf::Value* Get(absl::string_view key);
  absl::Status MustBe(absl::string_view key, absl::string_view what,
                      const google::protobuf::Value& got) const;

  const google::protobuf::Struct* object_;
  std::string path_;
  ReadLog* log_;
  std::set<std::string> known_;
};

}  // namespace zeroshard::config::internal

#endif  // ZEROSHARD_WORKER_CONFIG_JSON_READER_H_
