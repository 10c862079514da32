// The parser for configs: JSON as Python's json.load reads it (RFC 8259
// plus NaN, Infinity and -Infinity), with what DeepSpeed's hjson.load also
// takes in config files and configs carry: comments ("#" and "//" to the
// end of the line, "/* ... */"), trailing commas and a UTF-8 byte-order
// mark. hjson's quoteless keys and strings, single quotes, leading '+' or
// '.', hex numbers and control characters inside strings are errors. A
// repeated key in an object is an error, as DeepSpeed's
// dict_raise_error_on_duplicate_keys has it.
//
// Errors are INVALID_ARGUMENT with the 1-based line and column and
// json.load's wording: "invalid JSON at line 3, column 5: Expecting ','
// delimiter". A document that is valid JSON but not an object is "the
// config must be a JSON object". Pure functions; thread-safe.
#ifndef ZEROSHARD_WORKER_CONFIG_JSON_PARSE_H_
#define ZEROSHARD_WORKER_CONFIG_JSON_PARSE_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/struct.pb.h"

namespace zeroshard::config::internal {

// Nesting deeper than this is an error (json.load's recursion limit is
// about 1000; no config nests beyond 5).
inline constexpr int kMaxJsonDepth = 200;

absl::StatusOr<google::protobuf::Struct> ParseJsonObject(
    absl::string_view text);

}  // namespace zeroshard::config::internal

#endif  // ZEROSHARD_WORKER_CONFIG_JSON_PARSE_H_
