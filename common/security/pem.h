// Reads a PEM file (certificate, key or CA bundle) named by a flag, for
// the server's and the client's TLS credentials. The contents are handed
// to gRPC and never printed.
#ifndef ZEROSHARD_COMMON_SECURITY_PEM_H_
#define ZEROSHARD_COMMON_SECURITY_PEM_H_

#include <string>

#include "absl/status/statusor.h"

namespace zeroshard::security {

// The file's text. NOT_FOUND (unreadable) or INVALID_ARGUMENT (no PEM
// block), each naming --`flag` and `path`.
absl::StatusOr<std::string> ReadPemFile(const std::string& flag,
                                        const std::string& path);

}  // namespace zeroshard::security

#endif  // ZEROSHARD_COMMON_SECURITY_PEM_H_
