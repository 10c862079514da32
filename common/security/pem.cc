#include "common/security/pem.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <memory>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/env/env.h"

namespace zeroshard::security {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Cert = std::unique_ptr<X509, X509Free>;
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;

Bio MemBio(const std::string& text) {
  return Bio(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

// Never asks for a passphrase (OpenSSL's default reads the terminal).
int NoPassphrase(char*, int, int, void*) { return 0; }

Cert FirstCertificate(const std::string& pem) {
  Bio bio = MemBio(pem);
  Cert c(PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr));
  ERR_clear_error();
  return c;
}

Key PrivateKey(const std::string& pem) {
  Bio bio = MemBio(pem);
  Key k(PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr));
  ERR_clear_error();
  return k;
}

}  // namespace

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

absl::Status CheckCertificates(const std::string& flag, const std::string& path,
                               const std::string& pem) {
  const size_t blocks = [&] {
    size_t n = 0;
    for (size_t at = pem.find("-----BEGIN CERTIFICATE-----");
         at != std::string::npos;
         at = pem.find("-----BEGIN CERTIFICATE-----", at + 1)) {
      ++n;
    }
    return n;
  }();
  Bio bio = MemBio(pem);
  size_t parsed = 0;
  while (Cert(PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr))) {
    ++parsed;
  }
  ERR_clear_error();
  if (parsed == 0 || parsed != blocks) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": ", path,
                     parsed == 0 ? " holds no valid certificate"
                                 : " holds a certificate that does not parse"));
  }
  return absl::OkStatus();
}

std::string CertificateTimeWarning(const std::string& flag,
                                   const std::string& path,
                                   const std::string& pem) {
  Cert cert = FirstCertificate(pem);
  if (cert == nullptr) return "";
  const ASN1_TIME* not_before = X509_get0_notBefore(cert.get());
  const ASN1_TIME* not_after = X509_get0_notAfter(cert.get());
  auto text = [](const ASN1_TIME* t) {
    Bio out(BIO_new(BIO_s_mem()));
    if (out == nullptr || ASN1_TIME_print(out.get(), t) != 1)
      return std::string("?");
    char* data = nullptr;
    const long n = BIO_get_mem_data(out.get(), &data);
    return std::string(data, n > 0 ? static_cast<size_t>(n) : 0);
  };
  std::string problem;
  if (X509_cmp_current_time(not_after) <= 0) {
    problem = absl::StrCat("expired on ", text(not_after));
  } else if (X509_cmp_current_time(not_before) > 0) {
    problem = absl::StrCat("is not valid before ", text(not_before),
                           " (is this machine's clock right?)");
  }
  ERR_clear_error();
  if (problem.empty()) return "";
  return absl::StrCat("--", flag, ": the certificate in ", path, " ", problem,
                      ": clients will refuse it (certificate verify failed)");
}

absl::Status CheckPrivateKey(const std::string& flag, const std::string& path,
                             const std::string& pem) {
  if (PrivateKey(pem) == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": ", path,
                     " holds no usable private key (truncated, encrypted or "
                     "not a key)"));
  }
  return absl::OkStatus();
}

absl::Status CheckKeyMatchesCertificate(const std::string& cert_flag,
                                        const std::string& cert_path,
                                        const std::string& cert_pem,
                                        const std::string& key_flag,
                                        const std::string& key_path,
                                        const std::string& key_pem) {
  Cert cert = FirstCertificate(cert_pem);
  Key key = PrivateKey(key_pem);
  const bool match = cert != nullptr && key != nullptr &&
                     X509_check_private_key(cert.get(), key.get()) == 1;
  ERR_clear_error();
  if (!match) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", key_flag, ": ", key_path,
                     " is not the private key of the certificate in --",
                     cert_flag, " ", cert_path));
  }
  return absl::OkStatus();
}

}  // namespace zeroshard::security
