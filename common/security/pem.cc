#include "common/security/pem.h"

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/env/env.h"

namespace zeroshard::security {

absl::StatusOr<std::string> ReadPemFile(const std::string& flag,
                                        const std::string& path, Env* env) {
  absl::StatusOr<std::string> text = ReadSmallFile(env, path);
  if (!text.ok()) {
    return absl::Status(
        text.status().code(),
        absl::StrCat("--", flag, ": ", text.status().message()));
  }
  if (!absl::StrContains(*text, "-----BEGIN ")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": ", path, " is not a PEM file"));
  }
  return text;
}

}  // namespace zeroshard::security
