// ClientText: how the server quotes a string a client sent (a job id, a
// worker name, an idempotency key, an address) in an error message or a
// log line. At most kMaxQuotedBytes of it, escaped (a newline becomes \n,
// a tab \t, a carriage return \r, other control and non-ASCII bytes
// \xNN, a backslash \\ and a double quote \"), then "...(N bytes)" when
// it was longer. So an answer or a log line never carries more than a
// bounded prefix of client input, and client input can never start a line
// of the log.
//
// Header-only (the fuzz build compiles the store's sources directly).
// Thread-safe: pure functions.
#ifndef ZEROSHARD_COMMON_CLIENT_TEXT_H_
#define ZEROSHARD_COMMON_CLIENT_TEXT_H_

#include <cstddef>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace zeroshard {

inline constexpr size_t kMaxQuotedBytes = 64;

// `s` escaped as described above (unbounded).
inline std::string EscapeClientText(absl::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      default:
        if (c < 0x20 || c >= 0x7f) {
          out += "\\x";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out += ch;
        }
    }
  }
  return out;
}

// `s` escaped and bounded as described above (without quotes around it).
inline std::string ClientText(absl::string_view s,
                              size_t max_bytes = kMaxQuotedBytes) {
  if (s.size() <= max_bytes) return EscapeClientText(s);
  return absl::StrCat(EscapeClientText(s.substr(0, max_bytes)), "...(",
                      s.size(), " bytes)");
}

// Longest error message the server answers with: a message built from
// several quoted strings is cut here (ToGrpcStatus), as a last resort.
inline constexpr size_t kMaxErrorMessageBytes = 1024;

// `message` cut to kMaxErrorMessageBytes (with "..." at the end when cut).
inline std::string BoundedMessage(absl::string_view message) {
  if (message.size() <= kMaxErrorMessageBytes) return std::string(message);
  return absl::StrCat(message.substr(0, kMaxErrorMessageBytes - 3), "...");
}

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_CLIENT_TEXT_H_
