// Reads a PEM file (certificate, key or CA bundle) named by a flag, for
// the server's and the client's TLS credentials. The contents are handed
// to gRPC and never printed.
#ifndef ZEROSHARD_COMMON_SECURITY_PEM_H_
#define ZEROSHARD_COMMON_SECURITY_PEM_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/env/env.h"

namespace zeroshard::security {

// The file's text, read through `env`. The Env's error when it cannot be
// read (NOT_FOUND when missing) or INVALID_ARGUMENT (no PEM block), each
// naming --`flag` and `path`.
absl::StatusOr<std::string> ReadPemFile(const std::string& flag,
                                        const std::string& path,
                                        Env* env = DefaultEnv());

}  // namespace zeroshard::security

#endif  // ZEROSHARD_COMMON_SECURITY_PEM_H_
