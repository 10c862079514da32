#include "common/security/tokens.h"

#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/env/env.h"

namespace zeroshard::security {
namespace {

bool ValidToken(absl::string_view t) {
  return t.size() >= kMinTokenLength &&
         FirstBadTokenByte(t) == absl::string_view::npos;
}

absl::StatusOr<std::string> ReadWholeFile(Env* env, const std::string& path,
                                          const std::string& what) {
  absl::StatusOr<std::string> text = ReadSmallFile(env, path);
  if (!text.ok()) {
    return absl::Status(
        text.status().code(),
        absl::StrCat("cannot read ", what, ": ", text.status().message()));
  }
  return text;
}

// The first line of `text` that is not blank or a comment, trimmed.
std::optional<std::string> FirstLine(absl::string_view text) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (!line.empty() && line[0] != '#') return std::string(line);
  }
  return std::nullopt;
}

absl::StatusOr<std::string> CheckedClientToken(std::optional<std::string> t,
                                               const std::string& source) {
  if (!t.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(source, " holds no token"));
  }
  if (!ValidToken(*t)) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": the token must be at least ", kMinTokenLength,
                     " printable characters without spaces"));
  }
  return *std::move(t);
}

}  // namespace

size_t FirstBadTokenByte(absl::string_view token) {
  for (size_t i = 0; i < token.size(); ++i) {
    if (token[i] <= ' ' || token[i] > '~') return i;
  }
  return absl::string_view::npos;
}

const char* RoleName(Role role) {
  return role == Role::kAdmin ? "admin" : "worker";
}

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  const size_t n = a.size() > b.size() ? a.size() : b.size();
  // volatile keeps the compiler from turning the loop into an early exit.
  volatile unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? a[i] : 0;
    const unsigned char y = i < b.size() ? b[i] : 0;
    diff = diff | (x ^ y);
  }
  return diff == 0;
}

absl::StatusOr<TokenTable> TokenTable::Parse(absl::string_view text,
                                             const std::string& source) {
  TokenTable table;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::vector<absl::string_view> f =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    const std::string where = absl::StrCat(source, ":", line_no);
    if (f.size() < 3 || f.size() > 4) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": expected 'TOKEN JOB ROLE [NAME]' (", f.size(), " fields)"));
    }
    if (!ValidToken(f[0])) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": the token must be at least ", kMinTokenLength,
                       " printable characters"));
    }
    Entry e;
    e.token = std::string(f[0]);
    e.principal.job = std::string(f[1]);
    if (f[2] == "worker") {
      e.principal.role = Role::kWorker;
    } else if (f[2] == "admin") {
      e.principal.role = Role::kAdmin;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": role '", f[2], "' is not 'worker' or 'admin'"));
    }
    e.principal.name =
        f.size() == 4 ? std::string(f[3]) : absl::StrCat(f[1], "/", f[2]);
    if (table.Find(e.token) != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": the token repeats an earlier line's"));
    }
    table.entries_.push_back(std::move(e));
  }
  if (table.entries_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source, " holds no token"));
  }
  return table;
}

absl::StatusOr<TokenTable> TokenTable::ReadFile(const std::string& path,
                                                Env* env) {
  absl::StatusOr<std::string> text = ReadWholeFile(env, path, "tokens file");
  if (!text.ok()) return text.status();
  return Parse(*text, path);
}

const Principal* TokenTable::Find(absl::string_view token) const {
  const Principal* found = nullptr;
  for (const Entry& e : entries_) {
    if (ConstantTimeEquals(e.token, token)) found = &e.principal;
  }
  return found;
}

absl::StatusOr<std::optional<std::string>> ReadClientToken(
    const std::string& token_file, Env* env) {
  std::string path = token_file;
  if (path.empty()) {
    if (const char* v = std::getenv(kTokenEnv); v != nullptr && *v != '\0') {
      return CheckedClientToken(std::string(absl::StripAsciiWhitespace(v)),
                                absl::StrCat("$", kTokenEnv));
    }
    const char* f = std::getenv(kTokenFileEnv);
    if (f == nullptr || *f == '\0') return std::nullopt;
    path = f;
  }
  absl::StatusOr<std::string> text = ReadWholeFile(env, path, "token file");
  if (!text.ok()) return text.status();
  return CheckedClientToken(FirstLine(*text), path);
}

}  // namespace zeroshard::security
