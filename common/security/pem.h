// Reads a PEM file (certificate, key or CA bundle) named by a flag, for
// the server's and the client's TLS credentials, and checks what it holds
// with OpenSSL before gRPC sees it, so that a bad file is one clear line
// at start (gRPC would log its own lines and fail later). The contents are
// handed to gRPC and never printed.
//
// Thread-safety: free functions, no state.
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

// INVALID_ARGUMENT naming --`flag` and `path` unless `pem` holds at least
// one certificate and every certificate block in it parses.
absl::Status CheckCertificates(const std::string& flag, const std::string& path,
                               const std::string& pem);

// "" when the first certificate of `pem` (checked above) is valid now;
// else a line naming --`flag`, `path` and its validity dates: the
// certificate has expired, or is not valid yet (a clock ahead or behind).
// Clients refuse such a certificate ("certificate verify failed").
std::string CertificateTimeWarning(const std::string& flag,
                                   const std::string& path,
                                   const std::string& pem);

// INVALID_ARGUMENT naming --`flag` and `path` unless `pem` holds an
// unencrypted private key that parses (truncated, encrypted or a
// certificate in its place are refused).
absl::Status CheckPrivateKey(const std::string& flag, const std::string& path,
                             const std::string& pem);

// INVALID_ARGUMENT naming both flags and files unless the private key
// `key_pem` belongs to the first certificate of `cert_pem` (both already
// checked above).
absl::Status CheckKeyMatchesCertificate(const std::string& cert_flag,
                                        const std::string& cert_path,
                                        const std::string& cert_pem,
                                        const std::string& key_flag,
                                        const std::string& key_path,
                                        const std::string& key_pem);

}  // namespace zeroshard::security

#endif  // ZEROSHARD_COMMON_SECURITY_PEM_H_
