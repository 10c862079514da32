// zeroshard-server's security and limit flags, and what they build: the
// listening port's credentials, the token table, and the resource limits.
//
//   --tls_cert=server.pem --tls_key=server.key   TLS (required unless
//                                                --insecure)
//   --tls_ca=ca.pem --require_client_cert        mutual TLS: clients must
//                                                present a certificate the
//                                                CA signed
//   --token_file=tokens.txt                      bearer tokens (tokens.h);
//                                                required with TLS
//   --insecure                                   plaintext, explicitly
//                                                (loopback, tests); a
//                                                warning at start
//   --max_inflight_bytes, --max_streams_per_connection   limits (README
//                                                "Security")
//
// Key files are read here and handed to gRPC; nothing of them, nor any
// token, is ever printed.
#ifndef ZEROSHARD_SERVER_AUTH_SERVER_SECURITY_H_
#define ZEROSHARD_SERVER_AUTH_SERVER_SECURITY_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/flags.h"
#include "common/security/tokens.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/resource_quota.h"

namespace zeroshard {

struct ServerSecurityFlags {
  std::string tls_cert, tls_key, tls_ca, token_file;
  bool require_client_cert = false;
  bool insecure = false;
  // -1: half the machine's physical memory.
  int64_t max_inflight_bytes = -1;
  int64_t max_streams_per_connection = 16;
  // -1: the machine's physical memory with --storage=ram, no limit with
  // --storage=nvme (set by the caller); 0: no limit.
  int64_t max_state_bytes = -1;
};

void AddServerSecurityFlags(FlagSet* flags, ServerSecurityFlags* f);

struct ServerSecurity {
  std::shared_ptr<grpc::ServerCredentials> credentials;
  std::optional<security::TokenTable> tokens;  // none: no authentication
  std::vector<std::string> warnings;           // print at start
};

// Checks the flags' combination and reads the files. INVALID_ARGUMENT or
// NOT_FOUND naming the flag or file.
absl::StatusOr<ServerSecurity> LoadServerSecurity(const ServerSecurityFlags& f);

// Applies the limits: at most --max_streams_per_connection concurrent
// streams per client connection (more wait at the client: HTTP/2 flow
// control, not errors) and --max_inflight_bytes of gRPC buffers in the
// whole server (the resource quota; under pressure gRPC shrinks its
// receive windows, so senders slow down).
void ApplyServerLimits(const ServerSecurityFlags& f,
                       grpc::ServerBuilder* builder,
                       grpc::ResourceQuota* quota);

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_AUTH_SERVER_SECURITY_H_
