#include "worker/config/json_parse.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace zeroshard::config::internal {
namespace {

using google::protobuf::Value;

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

class Parser {
 public:
  explicit Parser(absl::string_view text) : s_(text) {}

  absl::Status Document(Value* out) {
    if (s_.substr(0, 3) == "\xEF\xBB\xBF") i_ = 3;  // a UTF-8 byte-order mark
    ZS_RETURN_IF_ERROR(SkipSpace());
    ZS_RETURN_IF_ERROR(ParseValue(out, 0));
    ZS_RETURN_IF_ERROR(SkipSpace());
    if (i_ != s_.size()) return Error("Extra data", i_);
    return absl::OkStatus();
  }

 private:
  absl::Status Error(absl::string_view what, size_t at) const {
    at = std::min(at, s_.size());
    const size_t line = 1 + std::count(s_.begin(), s_.begin() + at, '\n');
    const size_t line_start = s_.substr(0, at).rfind('\n');
    const size_t column =
        line_start == absl::string_view::npos ? at + 1 : at - line_start;
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid JSON at line ", line, ", column ", column, ": ", what));
  }

  // White space and comments (hjson's, as DeepSpeed reads config files:
  // "#" and "//" to the end of the line, "/* ... */").
  absl::Status SkipSpace() {
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++i_;
      } else if (c == '#' || s_.substr(i_, 2) == "//") {
        const size_t end = s_.find('\n', i_);
        i_ = end == absl::string_view::npos ? s_.size() : end + 1;
      } else if (s_.substr(i_, 2) == "/*") {
        const size_t end = s_.find("*/", i_ + 2);
        if (end == absl::string_view::npos) {
          return Error("a /* comment without its */", i_);
        }
        i_ = end + 2;
      } else {
        break;
      }
    }
    return absl::OkStatus();
  }

  bool Literal(absl::string_view word) {
    if (s_.substr(i_, word.size()) != word) return false;
    i_ += word.size();
    return true;
  }

  absl::Status ParseValue(Value* out, int depth) {
    if (depth > kMaxJsonDepth) {
      return Error(absl::StrCat("nested deeper than ", kMaxJsonDepth), i_);
    }
    if (i_ >= s_.size()) return Error("Expecting value", i_);
    const char c = s_[i_];
    if (c == '{') return ParseObject(out->mutable_struct_value(), depth);
    if (c == '[') return ParseArray(out, depth);
    if (c == '"') {
      std::string text;
      ZS_RETURN_IF_ERROR(ParseString(&text));
      out->set_string_value(std::move(text));
      return absl::OkStatus();
    }
    if (Literal("true")) {
      out->set_bool_value(true);
    } else if (Literal("false")) {
      out->set_bool_value(false);
    } else if (Literal("null")) {
      out->set_null_value(google::protobuf::NULL_VALUE);
    } else if (Literal("NaN")) {
      out->set_number_value(std::numeric_limits<double>::quiet_NaN());
    } else if (Literal("Infinity")) {
      out->set_number_value(std::numeric_limits<double>::infinity());
    } else if (Literal("-Infinity")) {
      out->set_number_value(-std::numeric_limits<double>::infinity());
    } else if (c == '-' || IsDigit(c)) {
      return ParseNumber(out);
    } else {
      return Error("Expecting value", i_);
    }
    return absl::OkStatus();
  }

  // -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?
  absl::Status ParseNumber(Value* out) {
    const size_t start = i_;
    if (s_[i_] == '-') ++i_;
    if (i_ >= s_.size() || !IsDigit(s_[i_])) {
      return Error("Expecting value", start);
    }
    if (s_[i_] == '0') {
      ++i_;
    } else {
      while (i_ < s_.size() && IsDigit(s_[i_])) ++i_;
    }
    if (i_ + 1 < s_.size() && s_[i_] == '.' && IsDigit(s_[i_ + 1])) {
      i_ += 2;
      while (i_ < s_.size() && IsDigit(s_[i_])) ++i_;
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      size_t j = i_ + 1;
      if (j < s_.size() && (s_[j] == '+' || s_[j] == '-')) ++j;
      if (j < s_.size() && IsDigit(s_[j])) {
        while (j < s_.size() && IsDigit(s_[j])) ++j;
        i_ = j;
      }
    }
    const std::string number(s_.substr(start, i_ - start));
    out->set_number_value(std::strtod(number.c_str(), nullptr));
    return absl::OkStatus();
  }

  absl::Status Hex4(size_t at, unsigned* out) {
    if (at + 4 > s_.size()) return Error("Invalid \\uXXXX escape", at - 1);
    unsigned v = 0;
    for (size_t k = at; k < at + 4; ++k) {
      const char h = s_[k];
      v <<= 4;
      if (IsDigit(h)) {
        v |= h - '0';
      } else if (h >= 'a' && h <= 'f') {
        v |= h - 'a' + 10;
      } else if (h >= 'A' && h <= 'F') {
        v |= h - 'A' + 10;
      } else {
        return Error("Invalid \\uXXXX escape", at - 1);
      }
    }
    *out = v;
    return absl::OkStatus();
  }

  static void AppendUtf8(unsigned cp, std::string* out) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  // At the opening quote.
  absl::Status ParseString(std::string* out) {
    const size_t start = i_++;
    while (true) {
      if (i_ >= s_.size()) return Error("Unterminated string", start);
      const char c = s_[i_];
      if (c == '"') {
        ++i_;
        return absl::OkStatus();
      }
      if (static_cast<unsigned char>(c) < 0x20) {
        return Error("Invalid control character in a string", i_);
      }
      if (c != '\\') {
        out->push_back(c);
        ++i_;
        continue;
      }
      if (i_ + 1 >= s_.size()) return Error("Unterminated string", start);
      const char e = s_[i_ + 1];
      const char* simple = "\"\\/bfnrt";
      const char* mapped = "\"\\/\b\f\n\r\t";
      const char* hit = e == '\0' ? nullptr : std::strchr(simple, e);
      if (hit != nullptr) {
        out->push_back(mapped[hit - simple]);
        i_ += 2;
        continue;
      }
      if (e != 'u') return Error("Invalid \\escape", i_);
      unsigned cp = 0;
      ZS_RETURN_IF_ERROR(Hex4(i_ + 2, &cp));
      i_ += 6;
      if (cp >= 0xD800 && cp < 0xDC00 && s_.substr(i_, 2) == "\\u") {
        unsigned low = 0;
        ZS_RETURN_IF_ERROR(Hex4(i_ + 2, &low));
        if (low >= 0xDC00 && low < 0xE000) {
          cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          i_ += 6;
        }
      }
      AppendUtf8(cp, out);
    }
  }

  // At '{'.
  absl::Status ParseObject(google::protobuf::Struct* out, int depth) {
    ++i_;
    ZS_RETURN_IF_ERROR(SkipSpace());
    if (i_ < s_.size() && s_[i_] == '}') {
      ++i_;
      return absl::OkStatus();
    }
    while (true) {
      if (i_ >= s_.size() || s_[i_] != '"') {
        return Error("Expecting property name enclosed in double quotes", i_);
      }
      const size_t key_at = i_;
      std::string key;
      ZS_RETURN_IF_ERROR(ParseString(&key));
      if (out->fields().count(key) != 0) {
        return Error(absl::StrCat("duplicate key \"", key, "\""), key_at);
      }
      ZS_RETURN_IF_ERROR(SkipSpace());
      if (i_ >= s_.size() || s_[i_] != ':') {
        return Error("Expecting ':' delimiter", i_);
      }
      ++i_;
      ZS_RETURN_IF_ERROR(SkipSpace());
      ZS_RETURN_IF_ERROR(ParseValue(&(*out->mutable_fields())[key], depth + 1));
      bool closed = false;
      ZS_RETURN_IF_ERROR(AfterItem('}', &closed));
      if (closed) return absl::OkStatus();
    }
  }

  // At '['.
  absl::Status ParseArray(Value* out, int depth) {
    ++i_;
    google::protobuf::ListValue* list = out->mutable_list_value();
    ZS_RETURN_IF_ERROR(SkipSpace());
    if (i_ < s_.size() && s_[i_] == ']') {
      ++i_;
      return absl::OkStatus();
    }
    while (true) {
      ZS_RETURN_IF_ERROR(ParseValue(list->add_values(), depth + 1));
      bool closed = false;
      ZS_RETURN_IF_ERROR(AfterItem(']', &closed));
      if (closed) return absl::OkStatus();
    }
  }

  // After an object member or an array element: `close` ends the
  // container (*closed = true), or a ',' comes first; a ',' before `close`
  // (a trailing comma) is fine, as hjson has it.
  absl::Status AfterItem(char close, bool* closed) {
    ZS_RETURN_IF_ERROR(SkipSpace());
    if (i_ < s_.size() && s_[i_] == ',') {
      ++i_;
      ZS_RETURN_IF_ERROR(SkipSpace());
    } else if (i_ >= s_.size() || s_[i_] != close) {
      return Error("Expecting ',' delimiter", i_);
    }
    if (i_ < s_.size() && s_[i_] == close) {
      ++i_;
      *closed = true;
    }
    return absl::OkStatus();
  }

  absl::string_view s_;
  size_t i_ = 0;
};

}  // namespace

absl::StatusOr<google::protobuf::Struct> ParseJsonObject(
    absl::string_view text) {
  Value root;
  Parser parser(text);
  absl::Status s = parser.Document(&root);
  if (!s.ok()) return s;
  if (root.kind_case() != Value::kStructValue) {
    return absl::InvalidArgumentError("the config must be a JSON object");
  }
  return std::move(*root.mutable_struct_value());
}

}  // namespace zeroshard::config::internal
