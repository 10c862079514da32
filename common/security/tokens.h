// Bearer tokens: the server's token table and the client's token, free of
// gRPC.
//
// A server reads a tokens file (--token_file), one token per line:
//
//   # token                            job      role    [name]
//   4f0c9a...(>= 16 characters)        gpt2-a   worker  workers
//   9d1e77...                          gpt2-a   admin   alice
//
// `role` is `worker` or `admin`; `name` (default "<job>/<role>") is what
// audit lines show instead of the token. Blank lines and lines starting
// with '#' are ignored. Tokens are printable ASCII without spaces, at least
// kMinTokenLength long, and unique. Errors name the file and line, never
// the token.
//
// A client reads its one token from a file (the first line that is not
// blank or a comment) or from the environment (ZEROSHARD_TOKEN, or
// ZEROSHARD_TOKEN_FILE naming a file): never from a flag's value, which
// `ps` shows.
//
// Thread-safety: a TokenTable is immutable after Parse; Find may be called
// from any thread.
#ifndef ZEROSHARD_COMMON_SECURITY_TOKENS_H_
#define ZEROSHARD_COMMON_SECURITY_TOKENS_H_

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/env/env.h"

namespace zeroshard::security {

inline constexpr size_t kMinTokenLength = 16;

// The index of the first byte of `token` a token may not hold (a space, a
// control character, anything not printable ASCII), or npos: tokens travel
// in an HTTP/2 header.
size_t FirstBadTokenByte(absl::string_view token);
inline constexpr char kTokenEnv[] = "ZEROSHARD_TOKEN";
inline constexpr char kTokenFileEnv[] = "ZEROSHARD_TOKEN_FILE";

enum class Role { kWorker, kAdmin };
const char* RoleName(Role role);

// Who a token belongs to.
struct Principal {
  std::string job;
  Role role = Role::kWorker;
  std::string name;  // for audit lines; never the token
};

// a == b without an early exit: the time depends on the lengths only, not
// on where the strings differ.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

class TokenTable {
 public:
  // Parses the text of a tokens file; `source` names it in errors.
  // INVALID_ARGUMENT for a malformed line, a short or repeated token, or
  // no token at all.
  static absl::StatusOr<TokenTable> Parse(absl::string_view text,
                                          const std::string& source);
  // Parse() of the file at `path`, read through `env`; the Env's error
  // (NOT_FOUND when missing) naming it when it cannot be read.
  static absl::StatusOr<TokenTable> ReadFile(const std::string& path,
                                             Env* env = DefaultEnv());

  // The principal of `token`, or null. Compares `token` with every entry
  // in constant time (no early exit on a match either), so the answer's
  // timing does not reveal which entry, or how much of one, matched.
  const Principal* Find(absl::string_view token) const;

  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::string token;
    Principal principal;
  };
  std::vector<Entry> entries_;
};

// The client's token: the first line of `token_file` that is not blank or
// a comment when `token_file` is set; else $ZEROSHARD_TOKEN; else the file
// named by $ZEROSHARD_TOKEN_FILE; else nullopt (no token). Files are read
// through `env`. The Env's error for a file that cannot be read (NOT_FOUND
// when missing) or INVALID_ARGUMENT name the file (or variable), never the
// token.
absl::StatusOr<std::optional<std::string>> ReadClientToken(
    const std::string& token_file, Env* env = DefaultEnv());

}  // namespace zeroshard::security

#endif  // ZEROSHARD_COMMON_SECURITY_TOKENS_H_
