// The client side of the servers' security (server/auth/server_security.h):
// flags, TLS channel credentials and the bearer token on every call, for
// every program that embeds ShardClient (zeroshard-ctl, the workers, the
// launcher).
//
//   --tls_ca=ca.pem                          TLS: trust servers signed by
//                                            this CA
//   --tls_cert=client.pem --tls_key=client.key   mutual TLS: this client's
//                                            certificate
//   --token_file=worker.token                the bearer token (else
//                                            $ZEROSHARD_TOKEN or the file
//                                            named by $ZEROSHARD_TOKEN_FILE;
//                                            never a flag's value)
//   --insecure                               plaintext (the default
//                                            without --tls_ca), and allows
//                                            sending a token over it
//
// A token is never sent in clear unless --insecure says so: with a token
// and neither --tls_ca nor --insecure, ApplyClientSecurity fails.
#ifndef ZEROSHARD_CLIENT_SECURITY_H_
#define ZEROSHARD_CLIENT_SECURITY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/shard_client.h"
#include "common/flags.h"
#include "grpcpp/security/credentials.h"

namespace zeroshard {

struct ClientSecurityFlags {
  std::string tls_ca, tls_cert, tls_key, token_file;
  bool insecure = false;
};

void AddClientSecurityFlags(FlagSet* flags, ClientSecurityFlags* f);

// The channel credentials the flags ask for (plaintext without --tls_ca).
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ClientCredentials(
    const ClientSecurityFlags& f);

// Sets options->credentials and appends the token interceptor (when there
// is a token) after any interceptors already there. INVALID_ARGUMENT or
// NOT_FOUND naming the flag, file or variable, never the token.
absl::Status ApplyClientSecurity(const ClientSecurityFlags& f,
                                 ClientOptions* options);

// The flags that give a child process the same security (file paths only:
// a token from the environment reaches it by inheritance).
std::vector<std::string> ClientSecurityArgs(const ClientSecurityFlags& f);

// A client interceptor factory that adds "authorization: Bearer <token>"
// to every call.
std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>
BearerTokenInterceptorFactory(std::string token);

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_SECURITY_H_
