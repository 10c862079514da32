#include "server/auth/server_security.h"

#include <unistd.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/security/pem.h"
#include "common/security/secret_file.h"
#include "grpcpp/security/server_credentials.h"

namespace zeroshard {

void AddServerSecurityFlags(FlagSet* flags, ServerSecurityFlags* f) {
  flags->String("tls_cert", &f->tls_cert,
                "TLS: this server's certificate chain (PEM).");
  flags->String("tls_key", &f->tls_key, "TLS: its private key (PEM).");
  flags->String("tls_ca", &f->tls_ca,
                "TLS: CA bundle (PEM) that client certificates must chain "
                "to.");
  flags->Bool("require_client_cert", &f->require_client_cert,
              "Mutual TLS: refuse clients without a certificate signed by "
              "--tls_ca.");
  flags->String("token_file", &f->token_file,
                "Bearer tokens, one 'TOKEN JOB ROLE [NAME]' per line (ROLE: "
                "worker or admin); required unless --insecure.");
  flags->Bool("allow_insecure_key_permissions",
              &f->allow_insecure_key_permissions,
              "Accept a --tls_key or --token_file that the group or others "
              "may read (refused otherwise, as ssh does; a warning at "
              "start).");
  flags->Bool("insecure", &f->insecure,
              "Plaintext, no TLS (loopback and tests only); without "
              "--token_file every caller is trusted.");
  flags->Int64("max_inflight_bytes", &f->max_inflight_bytes,
               "Most bytes of gRPC buffers (received, not yet applied "
               "pushes and sends) in this server; senders wait beyond it. "
               "Choose >= connections x streams x 8 MiB; -1: half of what the "
               "process may use (see --max_state_bytes).");
  flags->Int64("max_state_bytes", &f->max_state_bytes,
               "Most bytes of model state (p, m, v, gradients, serving "
               "copy) RegisterModel may allocate on this shard; -1: what the "
               "process may use (the smallest of physical memory, the "
               "cgroup's memory limit, RLIMIT_AS and RLIMIT_DATA, less 10% "
               "(at least 256 MiB)) with --storage=ram, unlimited with nvme; "
               "0: no limit.");
  flags->Int64("max_streams_per_connection", &f->max_streams_per_connection,
               "Most concurrent RPCs per client connection; further calls "
               "wait at the client.");
}

namespace {

// The file's permissions (secret_file.h): an error, or with
// --allow_insecure_key_permissions a warning in *out.
absl::Status CheckSecretFile(const ServerSecurityFlags& f, const char* flag,
                             const std::string& path, ServerSecurity* out) {
  absl::Status s = security::CheckSecretFile(flag, path);
  if (s.ok() || !f.allow_insecure_key_permissions || absl::IsNotFound(s)) {
    return s;
  }
  out->warnings.push_back(
      absl::StrCat("WARNING: ", s.message().substr(0, s.message().find(';')),
                   "; accepted because of --allow_insecure_key_permissions"));
  return absl::OkStatus();
}

absl::Status CheckNumbers(const ServerSecurityFlags& f) {
  if (f.max_inflight_bytes != -1 && f.max_inflight_bytes < (64ll << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_inflight_bytes ", f.max_inflight_bytes,
                     " must be >= 64 MiB (67108864), or -1"));
  }
  if (f.max_streams_per_connection < 1 ||
      f.max_streams_per_connection > 65536) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_streams_per_connection ",
                     f.max_streams_per_connection, " is not in [1, 65536]"));
  }
  if (f.max_state_bytes < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_state_bytes ", f.max_state_bytes,
                     " is negative (-1: the default limit, 0: no limit)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ServerSecurity> LoadServerSecurity(
    const ServerSecurityFlags& f) {
  const bool any_tls =
      !f.tls_cert.empty() || !f.tls_key.empty() || !f.tls_ca.empty();
  if (absl::Status s = CheckNumbers(f); !s.ok()) return s;
  if (f.insecure && (any_tls || f.require_client_cert)) {
    return absl::InvalidArgumentError(
        "--insecure excludes --tls_cert, --tls_key, --tls_ca and "
        "--require_client_cert");
  }
  ServerSecurity out;
  if (!f.token_file.empty()) {
    if (absl::Status s = CheckSecretFile(f, "token_file", f.token_file, &out);
        !s.ok()) {
      return s;
    }
    absl::StatusOr<security::TokenTable> t =
        security::TokenTable::ReadFile(f.token_file);
    if (!t.ok()) {
      return absl::Status(t.status().code(),
                          absl::StrCat("--token_file: ", t.status().message()));
    }
    out.tokens = *std::move(t);
  }
  if (f.insecure) {
    out.warnings.push_back(
        "WARNING: --insecure: plaintext gRPC; anyone on the network path "
        "can read and alter the traffic (tokens included)");
    if (!out.tokens.has_value()) {
      out.warnings.push_back(
          "WARNING: --insecure without --token_file: no authentication; "
          "anyone who can reach this port can read and change the model");
    }
    return out;
  }
  if (f.tls_cert.empty() || f.tls_key.empty()) {
    return absl::InvalidArgumentError(
        "give --tls_cert and --tls_key (TLS), or --insecure for plaintext");
  }
  if (f.require_client_cert && f.tls_ca.empty()) {
    return absl::InvalidArgumentError("--require_client_cert needs --tls_ca");
  }
  if (!out.tokens.has_value()) {
    return absl::InvalidArgumentError(
        "give --token_file (bearer tokens of the job's workers and admins)");
  }
  absl::StatusOr<std::string> cert =
      security::ReadPemFile("tls_cert", f.tls_cert);
  if (!cert.ok()) return cert.status();
  if (absl::Status s =
          security::CheckCertificates("tls_cert", f.tls_cert, *cert);
      !s.ok()) {
    return s;
  }
  if (std::string w =
          security::CertificateTimeWarning("tls_cert", f.tls_cert, *cert);
      !w.empty()) {
    out.warnings.push_back(std::move(w));
  }
  if (absl::Status s = CheckSecretFile(f, "tls_key", f.tls_key, &out);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<std::string> key = security::ReadPemFile("tls_key", f.tls_key);
  if (!key.ok()) return key.status();
  if (absl::Status s = security::CheckPrivateKey("tls_key", f.tls_key, *key);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = security::CheckKeyMatchesCertificate(
          "tls_cert", f.tls_cert, *cert, "tls_key", f.tls_key, *key);
      !s.ok()) {
    return s;
  }
  if (!f.tls_ca.empty()) {
    absl::StatusOr<std::string> ca = security::ReadPemFile("tls_ca", f.tls_ca);
    if (!ca.ok()) return ca.status();
    if (absl::Status s = security::CheckCertificates("tls_ca", f.tls_ca, *ca);
        !s.ok()) {
      return s;
    }
    out.root_certs = *std::move(ca);
  }
  out.cert_chain = *std::move(cert);
  out.private_key = *std::move(key);
  return out;
}

std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials(
    const ServerSecurityFlags& f, ServerSecurity* s) {
  if (f.insecure) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions ssl(
      !f.require_client_cert
          ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
          : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  if (!f.tls_ca.empty() && !f.require_client_cert) {
    // A certificate is optional, but one that is presented must verify.
    ssl.client_certificate_request =
        GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  pair.cert_chain = s->cert_chain;
  pair.private_key = std::move(s->private_key);
  s->private_key.clear();
  ssl.pem_key_cert_pairs.push_back(std::move(pair));
  ssl.pem_root_certs = s->root_certs;
  return grpc::SslServerCredentials(ssl);
}

void ApplyServerLimits(const ServerSecurityFlags& f,
                       grpc::ServerBuilder* builder,
                       grpc::ResourceQuota* quota) {
  builder->AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                              static_cast<int>(f.max_streams_per_connection));
  int64_t bytes = f.max_inflight_bytes;
  if (bytes == -1) {
    bytes = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) *
            sysconf(_SC_PAGESIZE) / 2;
  }
  quota->Resize(static_cast<size_t>(bytes));
}

}  // namespace zeroshard
