#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "common/security/access.h"
#include "common/security/pem.h"
#include "common/security/secret_file.h"
#include "common/security/tokens.h"
#include "gtest/gtest.h"
#include "openssl/evp.h"
#include "openssl/pem.h"
#include "openssl/x509.h"

namespace zeroshard::security {
namespace {

constexpr char kWorkerTok[] = "worker-token-0123456789";
constexpr char kAdminTok[] = "admin-token-0123456789ab";

const char kFile[] =
    "# token job role name\n"
    "\n"
    "worker-token-0123456789  job-a worker\n"
    "  admin-token-0123456789ab\tjob-a  admin alice  \n"
    "other-job-token-01234567 job-b worker bob\n";

TEST(ConstantTimeEquals, ComparesWholeStrings) {
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_TRUE(ConstantTimeEquals("abcdef", "abcdef"));
  EXPECT_FALSE(ConstantTimeEquals("abcdef", "abcdeg"));
  EXPECT_FALSE(ConstantTimeEquals("abcdef", "bbcdef"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abcdef"));
  EXPECT_FALSE(ConstantTimeEquals("abcdef", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("", "a"));
  EXPECT_FALSE(ConstantTimeEquals(std::string("a\0", 2), "a"));
}

TEST(TokenTable, ParsesAndFinds) {
  auto t = TokenTable::Parse(kFile, "tokens.txt");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->size(), 3u);
  const Principal* w = t->Find(kWorkerTok);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->job, "job-a");
  EXPECT_EQ(w->role, Role::kWorker);
  EXPECT_EQ(w->name, "job-a/worker");
  const Principal* a = t->Find(kAdminTok);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->role, Role::kAdmin);
  EXPECT_EQ(a->name, "alice");
  EXPECT_EQ(t->Find("other-job-token-01234567")->job, "job-b");
  EXPECT_EQ(t->Find(""), nullptr);
  EXPECT_EQ(t->Find("worker-token-012345678"), nullptr);    // prefix
  EXPECT_EQ(t->Find("worker-token-01234567890"), nullptr);  // longer
  EXPECT_EQ(t->Find("job-a"), nullptr);
}

TEST(TokenTable, RejectsBadFilesWithoutEchoingTokens) {
  struct Case {
    std::string text, want;
  } cases[] = {
      {"", "holds no token"},
      {"# only a comment\n", "holds no token"},
      {"short job-a worker\n", "f:1: the token must be at least 16"},
      {"worker-token-0123456789 job-a\n", "f:1: expected 'TOKEN JOB ROLE"},
      {"worker-token-0123456789 job-a root\n", "role 'root'"},
      {"worker-token-0123456789 job-a worker x y\n", "5 fields"},
      {"worker-token-0123456789 a worker\nworker-token-0123456789 b admin\n",
       "f:2: the token repeats"},
  };
  for (const Case& c : cases) {
    auto t = TokenTable::Parse(c.text, "f");
    ASSERT_FALSE(t.ok()) << c.text;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find(c.want), std::string::npos)
        << t.status();
    EXPECT_EQ(t.status().message().find("worker-token"), std::string::npos)
        << t.status();
  }
  auto missing = TokenTable::ReadFile("/nonexistent/tokens");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

TEST(ReadClientToken, FileThenEnvironment) {
  const std::string dir =
      std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  const std::string path = dir + "/client.token";
  std::ofstream(path) << "# mine\n\n  " << kWorkerTok << "  \n";
  unsetenv(kTokenEnv);
  unsetenv(kTokenFileEnv);
  auto none = ReadClientToken("");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  auto from_file = ReadClientToken(path);
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  EXPECT_EQ(**from_file, kWorkerTok);
  setenv(kTokenFileEnv, path.c_str(), 1);
  EXPECT_EQ(**ReadClientToken(""), kWorkerTok);
  setenv(kTokenEnv, kAdminTok, 1);  // the variable wins over the file's
  EXPECT_EQ(**ReadClientToken(""), kAdminTok);
  EXPECT_EQ(**ReadClientToken(path), kWorkerTok);  // the flag wins
  setenv(kTokenEnv, "short", 1);
  auto bad = ReadClientToken("");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message().find("short"), std::string::npos);
  unsetenv(kTokenEnv);
  unsetenv(kTokenFileEnv);
  EXPECT_EQ(ReadClientToken(dir + "/nope").status().code(),
            absl::StatusCode::kNotFound);
  std::ofstream(path) << "# nothing\n";
  EXPECT_EQ(ReadClientToken(path).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Access, RoleTable) {
  for (const char* m : {"/zeroshard.v1.ShardService/RegisterModel",
                        "/zeroshard.v1.ShardService/WriteParameters",
                        "/zeroshard.v1.ShardService/Gather",
                        "/zeroshard.v1.ShardService/PushGradients",
                        "/zeroshard.v1.ShardService/PrepareStep",
                        "/zeroshard.v1.ShardService/CommitStep",
                        "/zeroshard.v1.MembershipService/Join",
                        "/zeroshard.v1.MembershipService/Heartbeat",
                        "/zeroshard.v1.MembershipService/Leave",
                        "/zeroshard.v1.MembershipService/Rendezvous"}) {
    EXPECT_EQ(RequiredRole(m), Role::kWorker) << m;
  }
  for (const char* m : {"/zeroshard.v1.ShardService/GetStats",
                        "/zeroshard.v1.ShardService/Checkpoint",
                        "/zeroshard.v1.ShardService/Restore",
                        "/zeroshard.v1.ShardService/Shutdown",
                        "/zeroshard.v1.ShardService/SomethingNew",
                        "/zeroshard.v1.ShardService/gather", ""}) {
    EXPECT_EQ(RequiredRole(m), Role::kAdmin) << m;
  }
  EXPECT_EQ(RequiredRole("/grpc.health.v1.Health/Check"), std::nullopt);
}

TEST(Access, Decisions) {
  const Principal worker{"job-a", Role::kWorker, "w"};
  const Principal admin{"job-a", Role::kAdmin, "a"};
  const std::string push = "/zeroshard.v1.ShardService/PushGradients";
  const std::string stats = "/zeroshard.v1.ShardService/GetStats";
  EXPECT_TRUE(Authorize(&worker, push, "job-a", "job-a").ok());
  EXPECT_EQ(Authorize(&worker, push, "", "").code(),
            absl::StatusCode::kFailedPrecondition);
  const std::string reg = "/zeroshard.v1.ShardService/RegisterModel";
  EXPECT_TRUE(Authorize(&worker, reg, "", "job-a").ok());
  EXPECT_EQ(Authorize(&worker, reg, "", "job-b").code(),
            absl::StatusCode::kPermissionDenied);
  // Workers join before they register: membership calls are allowed
  // without a model, for the token's job only.
  const std::string join = "/zeroshard.v1.MembershipService/Join";
  const std::string rendezvous = "/zeroshard.v1.MembershipService/Rendezvous";
  EXPECT_TRUE(Authorize(&worker, join, "", "").ok());
  EXPECT_TRUE(Authorize(&worker, join, "", "job-a").ok());
  EXPECT_TRUE(Authorize(&worker, rendezvous, "", "job-a").ok());
  EXPECT_EQ(Authorize(&worker, join, "", "job-b").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Authorize(&worker, rendezvous, "job-b", "job-a").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Authorize(nullptr, join, "", "job-a").code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(Authorize(&admin, push, "job-a", "").ok());
  EXPECT_TRUE(Authorize(&admin, stats, "job-a", "").ok());
  EXPECT_TRUE(Authorize(nullptr, "/grpc.health.v1.Health/Check", "", "").ok());
  EXPECT_EQ(Authorize(nullptr, push, "job-a", "").code(),
            absl::StatusCode::kUnauthenticated);
  const absl::Status role = Authorize(&worker, stats, "job-a", "");
  EXPECT_EQ(role.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(role.message().find("needs the admin role"), std::string::npos);
  const absl::Status server_job = Authorize(&worker, push, "job-b", "");
  EXPECT_EQ(server_job.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(server_job.message().find("holds job 'job-b'"), std::string::npos);
  EXPECT_EQ(Authorize(&admin, push, "job-a", "job-b").code(),
            absl::StatusCode::kPermissionDenied);
}

TEST(SecretFileTest, OwnerOnlyModesPass) {
  for (mode_t m : {0600, 0400, 0700, 0100600}) {
    EXPECT_TRUE(CheckSecretFileMode("tls_key", "k", m, 1000, 1000).ok()) << m;
  }
}

TEST(SecretFileTest, GroupOrOthersRefusedNamingFlagFileAndMode) {
  absl::Status s = CheckSecretFileMode("tls_key", "/d/x.key", 0100644, 0, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "--tls_key: permissions 0644 for '/d/x.key' are too open: other "
            "users may read it; chmod 600 it, or give "
            "--allow_insecure_key_permissions");
  EXPECT_FALSE(CheckSecretFileMode("token_file", "t", 0640, 1000, 1000).ok());
  EXPECT_FALSE(CheckSecretFileMode("token_file", "t", 0604, 1000, 1000).ok());
  EXPECT_FALSE(CheckSecretFileMode("token_file", "t", 0602, 1000, 1000).ok());
  EXPECT_FALSE(CheckSecretFileMode("token_file", "t", 0620, 1000, 1000).ok());
}

TEST(SecretFileTest, RootOwnedGroupReadableSecretOfAPodPasses) {
  // A Kubernetes Secret volume with fsGroup: root:<fsGroup> 0440.
  EXPECT_TRUE(CheckSecretFileMode("tls_key", "k", 0440, 0, 65532).ok());
  EXPECT_TRUE(CheckSecretFileMode("tls_key", "k", 0640, 0, 65532).ok());
  EXPECT_FALSE(CheckSecretFileMode("tls_key", "k", 0444, 0, 65532).ok());
  EXPECT_FALSE(CheckSecretFileMode("tls_key", "k", 0460, 0, 65532).ok());
  EXPECT_FALSE(CheckSecretFileMode("tls_key", "k", 0440, 0, 0).ok());
  EXPECT_FALSE(CheckSecretFileMode("tls_key", "k", 0440, 7, 65532).ok());
}

TEST(PemTest, RefusesWhatIsNoKeyOrCertificate) {
  const std::string junk =
      "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END "
      "CERTIFICATE-----\n";
  absl::Status s = CheckCertificates("tls_cert", "c.pem", junk);
  EXPECT_EQ(s.message(), "--tls_cert: c.pem holds no valid certificate");
  s = CheckPrivateKey("tls_key", "k.key", junk);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--tls_key: k.key holds no usable private key"),
            std::string::npos);
  EXPECT_FALSE(
      CheckKeyMatchesCertificate("tls_cert", "c", junk, "tls_key", "k", junk)
          .ok());
}

// A self-signed certificate valid from now + `from` to now + `to` seconds,
// as PEM.
std::string CertificateValid(long from, long to) {
  EVP_PKEY* key = EVP_EC_gen("prime256v1");
  X509* x = X509_new();
  X509_set_version(x, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
  X509_gmtime_adj(X509_getm_notBefore(x), from);
  X509_gmtime_adj(X509_getm_notAfter(x), to);
  X509_set_pubkey(x, key);
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("zs"), -1,
                             -1, 0);
  X509_set_issuer_name(x, name);
  X509_sign(x, key, EVP_sha256());
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(bio, x);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  std::string pem(data, static_cast<size_t>(n));
  BIO_free(bio);
  X509_free(x);
  EVP_PKEY_free(key);
  return pem;
}

TEST(PemTest, ExpiredOrNotYetValidCertificatesAreNamed) {
  const long day = 86400;
  const std::string valid = CertificateValid(-day, day);
  ASSERT_TRUE(CheckCertificates("tls_cert", "v.pem", valid).ok());
  EXPECT_EQ(CertificateTimeWarning("tls_cert", "v.pem", valid), "");
  const std::string expired = CertificateValid(-2 * day, -day);
  ASSERT_TRUE(CheckCertificates("tls_cert", "e.pem", expired).ok());
  const std::string w = CertificateTimeWarning("tls_cert", "e.pem", expired);
  EXPECT_EQ(w.rfind("--tls_cert: the certificate in e.pem expired on ", 0), 0u)
      << w;
  EXPECT_NE(w.find("certificate verify failed"), std::string::npos) << w;
  const std::string early = CertificateValid(day, 2 * day);
  EXPECT_NE(CertificateTimeWarning("tls_cert", "f.pem", early)
                .find("is not valid before"),
            std::string::npos);
}

}  // namespace
}  // namespace zeroshard::security
