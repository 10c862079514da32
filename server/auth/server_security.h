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
//   --allow_insecure_key_permissions             accept a key or token
//                                                file others may read
//                                                (a warning at start)
//
// Every flag and file is checked by LoadServerSecurity before gRPC starts
// (exit 2 with one line naming the flag): numbers in range, the key and
// token files' permissions (common/security/secret_file.h: no access for
// others, none for the group unless a root-owned secret volume), the PEM
// files parsed and the key matched to the certificate with OpenSSL.
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
  bool allow_insecure_key_permissions = false;
  // -1: half of what the process may use (the server sets it from
  // common/memory_limit.h; ApplyServerLimits takes half the physical
  // memory for a -1 left here).
  int64_t max_inflight_bytes = -1;
  int64_t max_streams_per_connection = 16;
  // -1: what the process may use (common/memory_limit.h: the smallest of
  // physical memory, the cgroup limit, RLIMIT_AS and RLIMIT_DATA, less a
  // margin) with --storage=ram, no limit with --storage=nvme (set by the
  // caller); 0: no limit; other negatives are refused.
  int64_t max_state_bytes = -1;
};

void AddServerSecurityFlags(FlagSet* flags, ServerSecurityFlags* f);

struct ServerSecurity {
  std::optional<security::TokenTable> tokens;  // none: no authentication
  std::vector<std::string> warnings;           // print at start
  // TLS material (checked), for MakeServerCredentials; empty: plaintext.
  std::string cert_chain, private_key, root_certs;
};

// Checks the flags (ranges, combination) and the files, and reads them;
// starts nothing of gRPC. INVALID_ARGUMENT or NOT_FOUND naming the flag
// and the file.
absl::StatusOr<ServerSecurity> LoadServerSecurity(const ServerSecurityFlags& f);

// The listening port's credentials from `s` (TLS unless --insecure); call
// after LoadServerSecurity succeeded, once gRPC may start its threads.
// Clears s->private_key.
std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials(
    const ServerSecurityFlags& f, ServerSecurity* s);

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
