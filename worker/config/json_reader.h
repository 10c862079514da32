// Reads one JSON object of a config (parsed into a google.protobuf.Struct)
// key by key, naming every value by its full path ("zero_optimization.stage")
// and collecting warnings. Internal to ds_config.
//
// Every getter marks its key as known, returns the default for an absent
// key or JSON null, and records the value and its source in
// ReadLog::resolved ("file", "default", "auto←..."). The string "auto" is
// looked up in ReadLog::fills by the key's full path: a fill with a value
// stands for it (source "auto←<fill.source>"), a `derive` fill reads as
// absent (the caller derives and records it), a fill with `missing` is
// INVALID_ARGUMENT "<path>: <missing>", and a path with no fill is
// INVALID_ARGUMENT naming it ("auto" is logged in ReadLog::auto_keys in
// every case). A value of the wrong type or out of range is
// INVALID_ARGUMENT "<path>: must be <what>, got <value>".
//
// Unknown keys (not named by any call) are warnings, except a near miss of
// a known key (edit distance 1, or 2 for keys of 8+ characters, or a
// different case): that is an error "unknown key zero_optimisation (did
// you mean zero_optimization?)", collected in ReadLog::errors.
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
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/struct.pb.h"
#include "worker/config/resolved_table.h"

namespace zeroshard::config::internal {

// The largest integer a JSON number (a double) holds exactly: 2^53.
inline constexpr int64_t kMaxExactInt = int64_t{1} << 53;

// What stands for an "auto" value (see above).
struct AutoFill {
  google::protobuf::Value value;  // used unless `derive` or `missing`
  std::string source;             // "--learning_rate", "model (...)"
  std::string flag;               // the flag that gave it, if any
  bool derive = false;
  std::string missing;  // why nothing fills it, and what would
  bool used = false;    // set when an "auto" took it
};

struct ReadLog {
  std::vector<std::string> warnings;
  std::vector<std::string> errors;     // near-miss keys; the first is fatal
  std::vector<std::string> auto_keys;  // full paths, in reading order
  // "<path>: <what would fill it>" for each "auto" that nothing fills, in
  // reading order (AddUnfilled): the reader goes on as if the key were
  // absent, so that one error names them all (ds_config.cc), and the
  // warnings from there on, which may stem from that, are dropped.
  std::vector<std::string> unfilled;
  size_t warnings_before_unfilled = 0;
  void AddUnfilled(std::string entry);
  std::map<std::string, AutoFill> fills;  // by full path
  std::vector<ResolvedKey> resolved;      // in reading order
  int64_t steps = -1;  // the run's steps (--steps), -1 when not known
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
  // Whether `key` was read as an "auto" that nothing fills (ReadLog::
  // unfilled): the caller reads on as if it were absent.
  bool Unfilled(absl::string_view key) const;
  bool present() const { return object_ != nullptr; }

  // True if `key` holds a value other than null and "auto".
  bool Has(absl::string_view key);

  // An integral JSON number in [min, max] (5e8 is fine, 1.5 is not).
  absl::StatusOr<int64_t> Int(absl::string_view key, int64_t def, int64_t min,
                              int64_t max = kMaxExactInt);
  // Like Int(), but -1 when absent, null or a `derive` "auto" (callers use
  // min >= 0), and not recorded: the caller records the value it settles
  // on with Note(). *source receives "file", "auto←..." or "" (unset).
  absl::StatusOr<int64_t> IntOrUnset(absl::string_view key, int64_t min,
                                     std::string* source = nullptr,
                                     int64_t max = kMaxExactInt);
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

  // Records `key`'s resolved value and source in ReadLog::resolved.
  void Note(absl::string_view key, std::string value, std::string source);
  ReadLog* log() const { return log_; }

  // For a DeepSpeed key zeroshard does not use: if present, warns
  // "<path>: not used by zeroshard (<why>); ignored".
  void Ignore(absl::string_view key, absl::string_view why);

  // Warns "unknown key <path> ignored" for every key no call above named,
  // in sorted order; a near miss of a known key goes to ReadLog::errors.
  void WarnUnknown();

  // INVALID_ARGUMENT "<path of key>: <message>".
  absl::Status Error(absl::string_view key, absl::string_view message) const;

 private:
  // The value of `key` (null when absent, null or a `derive` "auto") and
  // its source ("file", "default", "auto←...", or "" for `derive`).
  struct Got {
    const google::protobuf::Value* value;
    std::string source;
  };
  absl::StatusOr<Got> Get(absl::string_view key);
  absl::Status MustBe(absl::string_view key, absl::string_view what,
                      const google::protobuf::Value& got) const;

  const google::protobuf::Struct* object_;
  std::string path_;
  ReadLog* log_;
  std::set<std::string> known_;
};

}  // namespace zeroshard::config::internal

#endif  // ZEROSHARD_WORKER_CONFIG_JSON_READER_H_
