#include "client/security.h"

#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/security/pem.h"
#include "common/security/tokens.h"
#include "grpcpp/support/client_interceptor.h"

namespace zeroshard {
namespace {

class BearerTokenInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit BearerTokenInterceptor(const std::string* header)
      : header_(header) {}
  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::
                PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace("authorization", *header_);
    }
    methods->Proceed();
  }

 private:
  const std::string* header_;  // owned by the factory
};

class BearerTokenFactory
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerTokenFactory(std::string token)
      : header_("Bearer " + std::move(token)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new BearerTokenInterceptor(&header_);
  }

 private:
  const std::string header_;
};

}  // namespace

std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>
BearerTokenInterceptorFactory(std::string token) {
  return std::make_unique<BearerTokenFactory>(std::move(token));
}

void AddClientSecurityFlags(FlagSet* flags, ClientSecurityFlags* f) {
  flags->String("tls_ca", &f->tls_ca,
                "TLS: CA bundle (PEM) the servers' certificates must chain "
                "to; without it, plaintext.");
  flags->String("tls_cert", &f->tls_cert,
                "Mutual TLS: this client's certificate chain (PEM).");
  flags->String("tls_key", &f->tls_key, "Mutual TLS: its private key (PEM).");
  flags->String("token_file", &f->token_file,
                "File holding the bearer token (else $ZEROSHARD_TOKEN, or "
                "the file named by $ZEROSHARD_TOKEN_FILE).");
  flags->Bool("insecure", &f->insecure,
              "Plaintext, and allow sending the token over it (loopback "
              "only).");
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ClientCredentials(
    const ClientSecurityFlags& f) {
  const bool any_tls =
      !f.tls_ca.empty() || !f.tls_cert.empty() || !f.tls_key.empty();
  if (f.insecure && any_tls) {
    return absl::InvalidArgumentError(
        "--insecure excludes --tls_ca, --tls_cert and --tls_key");
  }
  if (f.tls_cert.empty() != f.tls_key.empty()) {
    return absl::InvalidArgumentError("give --tls_cert and --tls_key together");
  }
  if (!any_tls) return grpc::InsecureChannelCredentials();
  if (f.tls_ca.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert needs --tls_ca (the CA of the servers)");
  }
  grpc::SslCredentialsOptions ssl;
  absl::StatusOr<std::string> ca = security::ReadPemFile("tls_ca", f.tls_ca);
  if (!ca.ok()) return ca.status();
  ssl.pem_root_certs = *std::move(ca);
  if (!f.tls_cert.empty()) {
    absl::StatusOr<std::string> cert =
        security::ReadPemFile("tls_cert", f.tls_cert);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key =
        security::ReadPemFile("tls_key", f.tls_key);
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *std::move(cert);
    ssl.pem_private_key = *std::move(key);
  }
  return grpc::SslCredentials(ssl);
}

absl::Status ApplyClientSecurity(const ClientSecurityFlags& f,
                                 ClientOptions* options) {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds =
      ClientCredentials(f);
  if (!creds.ok()) return creds.status();
  absl::StatusOr<std::optional<std::string>> token =
      security::ReadClientToken(f.token_file);
  if (!token.ok()) return token.status();
  if (token->has_value() && f.tls_ca.empty() && !f.insecure) {
    return absl::InvalidArgumentError(
        "refusing to send the bearer token in clear: give --tls_ca (TLS) or "
        "--insecure");
  }
  options->credentials = f.tls_ca.empty() ? nullptr : *std::move(creds);
  if (token->has_value()) {
    auto previous = options->interceptors;
    std::string value = **std::move(token);
    options->interceptors = [previous, value] {
      std::vector<std::unique_ptr<
          grpc::experimental::ClientInterceptorFactoryInterface>>
          v;
      if (previous) v = previous();
      v.push_back(BearerTokenInterceptorFactory(value));
      return v;
    };
  }
  return absl::OkStatus();
}

std::vector<std::string> ClientSecurityArgs(const ClientSecurityFlags& f) {
  std::vector<std::string> args;
  if (!f.tls_ca.empty()) args.push_back("--tls_ca=" + f.tls_ca);
  if (!f.tls_cert.empty()) args.push_back("--tls_cert=" + f.tls_cert);
  if (!f.tls_key.empty()) args.push_back("--tls_key=" + f.tls_key);
  if (!f.token_file.empty()) args.push_back("--token_file=" + f.token_file);
  if (f.insecure) args.push_back("--insecure");
  return args;
}

}  // namespace zeroshard
