// Issue 8 through real zeroshard-server processes on loopback with mutual
// TLS and bearer tokens (a throw-away CA made by make_test_certs.sh at test
// time): clients without a certificate, with another CA's certificate, in
// plaintext, with a wrong, missing or other job's token, and a worker token
// calling admin RPCs are all refused, and the model is unchanged after
// their attempts (stats and gather); every method of the services refuses
// a call without a token; refusals and admin calls are audited, without
// tokens; the right credentials train. The membership service (shard 0)
// takes only the job's worker and admin tokens.
#include "client/security.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <future>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "client/shard_client.h"
#include "fleet/local_fleet.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "proto/zeroshard.grpc.pb.h"
#include "server/auth/request_guard.h"
#include "tests/testing.h"

namespace zeroshard {
namespace {

using grpc::StatusCode;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

class SecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = new std::string(std::string(tmp ? tmp : "/tmp") + "/security");
    mkdir(dir_->c_str(), 0755);
    const char* srcdir = std::getenv("TEST_SRCDIR");
    const std::string script = std::string(srcdir ? srcdir : ".") +
                               "/zeroshard/tests/make_test_certs.sh";
    ASSERT_EQ(std::system(("bash " + script + " " + *dir_).c_str()), 0);
    unsetenv("ZEROSHARD_TOKEN");
    unsetenv("ZEROSHARD_TOKEN_FILE");
    auto binary = WorkspaceBinary("server/zeroshard-server");
    ASSERT_TRUE(binary.ok()) << binary.status();
    FleetOptions fo;
    fo.server_binary = *binary;
    fo.num_shards = 2;
    fo.work_dir = *dir_;
    fo.extra_args = {"--threads=1", "--grpc_threads=8"};
    fo.security_args = {"--tls_cert=" + P("server.pem"),
                        "--tls_key=" + P("server.key"),
                        "--tls_ca=" + P("ca.pem"), "--require_client_cert",
                        "--token_file=" + P("tokens.txt")};
    auto creds = ClientCredentials(Good());
    ASSERT_TRUE(creds.ok()) << creds.status();
    fo.health_credentials = *creds;
    auto fleet = LocalFleet::Start(fo);
    ASSERT_TRUE(fleet.ok()) << fleet.status();
    fleet_ = fleet->release();
  }
  static void TearDownTestSuite() {
    delete fleet_;
    fleet_ = nullptr;
  }

  static std::string P(const std::string& name) { return *dir_ + "/" + name; }
  static std::string Token(const std::string& name) {
    return Trim(ReadFile(P(name)));
  }
  // mTLS with the test CA's client certificate and `token_file`.
  static ClientSecurityFlags Good(const std::string& token_file = "") {
    ClientSecurityFlags f;
    f.tls_ca = P("ca.pem");
    f.tls_cert = P("client.pem");
    f.tls_key = P("client.key");
    f.token_file = token_file.empty() ? "" : P(token_file);
    return f;
  }
  static std::unique_ptr<ShardClient> Client(const ClientSecurityFlags& f) {
    ClientOptions o;
    o.addresses = fleet_->addresses();
    // localhost: the name in the server's certificate (so is 127.0.0.1).
    for (std::string& a : o.addresses) {
      a = "localhost" + a.substr(a.find(':'));
    }
    o.max_attempts = 1;
    o.deadline = std::chrono::milliseconds(10000);
    absl::Status s = ApplyClientSecurity(f, &o);
    EXPECT_TRUE(s.ok()) << s;
    auto c = ShardClient::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  static std::string* dir_;
  static LocalFleet* fleet_;
};

std::string* SecurityTest::dir_ = nullptr;
LocalFleet* SecurityTest::fleet_ = nullptr;

// Calls `method` with an empty message (a unary call; for streaming
// methods the server's answer to its first message is what counts).
grpc::Status CallRaw(const std::shared_ptr<grpc::Channel>& channel,
                     const std::string& method, const std::string& token) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  grpc::ByteBuffer request, response;
  grpc::Slice empty("");
  request = grpc::ByteBuffer(&empty, 1);
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) { done.set_value(s); });
  return done.get_future().get();
}

// The membership service on shard 0: a worker token joins its own job
// (also before any model is registered: this test runs first), never
// another job; another job's token is refused. Shard 1 does not serve it.
TEST_F(SecurityTest, MembershipNeedsTheJobsWorkerToken) {
  auto creds = ClientCredentials(Good());
  ASSERT_TRUE(creds.ok());
  auto channel_to = [&](int k) {
    const std::string& a = fleet_->addresses()[k];
    return grpc::CreateCustomChannel("localhost" + a.substr(a.find(':')),
                                     *creds, grpc::ChannelArguments());
  };
  auto join = [&](int k, const std::string& token, const std::string& job,
                  v1::JoinResponse* resp) {
    auto stub = v1::MembershipService::NewStub(channel_to(k));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(10));
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
    v1::JoinRequest req;
    req.set_job_id(job);
    req.set_worker_name("security-test");
    return stub->Join(&ctx, req, resp);
  };
  v1::JoinResponse joined;
  grpc::Status s = join(0, Token("worker.token"), "sec", &joined);
  ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  EXPECT_GE(joined.world().epoch(), 1u);
  EXPECT_EQ(joined.world().members_size(), 1);
  v1::JoinResponse refused;
  EXPECT_EQ(join(0, Token("worker.token"), "other", &refused).error_code(),
            StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(join(0, Token("other-job.token"), "sec", &refused).error_code(),
            StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(join(0, "", "sec", &refused).error_code(),
            StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(join(1, Token("worker.token"), "sec", &refused).error_code(),
            StatusCode::UNIMPLEMENTED);
  // Rendezvous and Leave with the same token.
  auto stub = v1::MembershipService::NewStub(channel_to(0));
  grpc::ClientContext rctx;
  rctx.AddMetadata("authorization", "Bearer " + Token("worker.token"));
  v1::RendezvousRequest rv;
  rv.set_job_id("sec");
  rv.set_member_id(joined.member_id());
  rv.set_epoch(joined.world().epoch());
  rv.set_blob("ucx-address");
  v1::RendezvousResponse group;
  s = stub->Rendezvous(&rctx, rv, &group);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(group.complete());
  ASSERT_EQ(group.blobs_size(), 1);
  EXPECT_EQ(group.blobs(0), "ucx-address");
  grpc::ClientContext lctx;
  lctx.AddMetadata("authorization", "Bearer " + Token("worker.token"));
  v1::LeaveRequest leave;
  leave.set_job_id("sec");
  leave.set_member_id(joined.member_id());
  v1::LeaveResponse left;
  s = stub->Leave(&lctx, leave, &left);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(left.world().members_size(), 0);
}

TEST_F(SecurityTest, OnlyTheJobsCredentialsReadOrChangeTheModel) {
  const v1::ModelSpec spec = testing::SmallSpec("sec", 2);
  auto worker = Client(Good("worker.token"));
  ASSERT_NE(worker, nullptr);
  ASSERT_TRUE(worker->RegisterModel(spec).ok());
  const uint64_t total = worker->plan().total();
  std::mt19937_64 rng(8);
  const std::vector<float> init = testing::RandomVector(rng, total, 1.0f);
  ASSERT_TRUE(worker->WriteParameters(Range{0, total}, init.data()).ok());
  auto admin = Client(Good("admin.token"));
  auto before = admin->Stats();
  ASSERT_TRUE(before.ok()) << before.status();

  // Wrong and missing tokens, and mTLS failures.
  std::ofstream(P("wrong.token")) << "0123456789abcdef0123456789abcdef\n";
  ClientSecurityFlags no_cert = Good("worker.token");
  no_cert.tls_cert = no_cert.tls_key = "";
  ClientSecurityFlags rogue = Good("worker.token");
  rogue.tls_cert = P("rogue.pem");
  rogue.tls_key = P("rogue.key");
  ClientSecurityFlags plaintext;
  plaintext.insecure = true;
  plaintext.token_file = P("worker.token");
  struct Case {
    std::string what;
    ClientSecurityFlags flags;
    std::vector<StatusCode> codes;
  };
  const std::vector<Case> cases = {
      {"no client certificate", no_cert, {StatusCode::UNAVAILABLE}},
      {"another CA's certificate", rogue, {StatusCode::UNAVAILABLE}},
      {"plaintext", plaintext, {StatusCode::UNAVAILABLE}},
      {"wrong token", Good("wrong.token"), {StatusCode::UNAUTHENTICATED}},
      {"no token", Good(), {StatusCode::UNAUTHENTICATED}},
      {"another job's token",
       Good("other-job.token"),
       {StatusCode::PERMISSION_DENIED}},
  };
  const std::vector<float> evil(total, 1e6f);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto client = Client(c.flags);
    ASSERT_NE(client, nullptr);
    ASSERT_TRUE(client->UseSpec(spec).ok());
    auto expect = [&](const absl::Status& s, const char* call) {
      bool listed = false;
      for (StatusCode code : c.codes) {
        listed |= static_cast<int>(s.code()) == static_cast<int>(code);
      }
      EXPECT_TRUE(listed) << call << ": " << s;
    };
    expect(client->WriteParameters(Range{0, total}, evil.data()), "write");
    expect(client->Push(Range{0, total}, v1::DTYPE_FP32, evil.data(),
                        PushId{0, 0, 0, "evil"}),
           "push");
    expect(client->Commit(0, 0, 1.0f, 1.0, false), "commit");
    std::vector<float> out(total);
    expect(client->Gather(Range{0, total}, v1::DTYPE_FP32, out.data()),
           "gather");
    expect(client->Stats().status(), "stats");
    v1::ModelSpec other = spec;
    other.set_job_id("other");
    expect(client->RegisterModel(other), "register");
  }
  // A worker token cannot call admin RPCs.
  auto stats = worker->Stats();
  EXPECT_EQ(stats.status().code(), absl::StatusCode::kPermissionDenied)
      << stats.status();
  EXPECT_NE(stats.status().message().find("needs the admin role"),
            std::string::npos);

  // Nothing changed: same step, no contribution, no new parameters.
  auto after = admin->Stats();
  ASSERT_TRUE(after.ok()) << after.status();
  for (size_t k = 0; k < after->size(); ++k) {
    EXPECT_EQ((*after)[k].step(), 0u);
    EXPECT_EQ((*after)[k].contributions_applied(), 0u);
    EXPECT_EQ((*after)[k].spec().job_id(), "sec");
    EXPECT_EQ((*after)[k].bytes_pushed(), (*before)[k].bytes_pushed());
  }
  std::vector<float> now(total);
  ASSERT_TRUE(worker->Gather(Range{0, total}, v1::DTYPE_FP32, now.data()).ok());
  EXPECT_EQ(testing::FirstBitDifference(now, init), -1);

  // The right credentials change it: one step.
  const std::vector<float> g = testing::RandomVector(rng, total, 0.1f);
  absl::Status s =
      worker->Push(Range{0, total}, v1::DTYPE_FP32, g.data(), {0, 0, 0, "w"});
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_TRUE(worker->Prepare(0, 0).ok());
  s = worker->Commit(0, 0, 1.0f, 1e-2, false);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_TRUE(worker->Gather(Range{0, total}, v1::DTYPE_FP32, now.data()).ok());
  EXPECT_NE(testing::FirstBitDifference(now, init), -1);
  after = admin->Stats();
  ASSERT_TRUE(after.ok());
  EXPECT_EQ((*after)[0].step(), 1u);

  // Audit: refusals and admin calls, by name, never a token.
  const std::string log = ReadFile(P("server-0.log"));
  EXPECT_NE(log.find("audit: refused who=anonymous"), std::string::npos);
  EXPECT_NE(log.find("code=UNAUTHENTICATED"), std::string::npos);
  EXPECT_NE(log.find("audit: refused who=other-workers"), std::string::npos);
  EXPECT_NE(log.find("audit: refused who=sec-workers peer=ipv4:127.0.0.1"),
            std::string::npos);
  EXPECT_NE(log.find("cert=worker-1 method=/zeroshard.v1.ShardService/"
                     "GetStats code=PERMISSION_DENIED"),
            std::string::npos);
  EXPECT_NE(log.find("audit: allowed who=sec-admin"), std::string::npos);
  for (const char* t :
       {"worker.token", "admin.token", "other-job.token", "wrong.token"}) {
    EXPECT_EQ(log.find(Token(t)), std::string::npos) << t;
  }
}

// Every method of both services, called without a token (over mTLS), is
// refused before its handler; with a worker token, every method outside
// the worker's list is refused too. (A method not implemented yet answers
// UNIMPLEMENTED to a worker token, which changes nothing either.)
TEST_F(SecurityTest, EveryMethodChecksTheToken) {
  auto creds = ClientCredentials(Good());
  ASSERT_TRUE(creds.ok());
  grpc::ChannelArguments args;
  auto channel = grpc::CreateCustomChannel(
      "localhost" +
          fleet_->addresses()[0].substr(fleet_->addresses()[0].find(':')),
      *creds, args);
  const std::string worker = Token("worker.token");
  int checked = 0;
  // The descriptors of every service in zeroshard.proto.
  const google::protobuf::FileDescriptor* file =
      v1::GatherRequest::descriptor()->file();
  ASSERT_GE(file->service_count(), 2);
  for (int si = 0; si < file->service_count(); ++si) {
    const google::protobuf::ServiceDescriptor* service = file->service(si);
    for (int i = 0; i < service->method_count(); ++i) {
      const std::string method = absl::StrCat("/", service->full_name(), "/",
                                              service->method(i)->name());
      SCOPED_TRACE(method);
      // Shard 0 serves both services: nothing may answer UNIMPLEMENTED.
      const grpc::Status anonymous = CallRaw(channel, method, "");
      EXPECT_EQ(anonymous.error_code(), StatusCode::UNAUTHENTICATED)
          << anonymous.error_code() << " " << anonymous.error_message();
      const bool worker_method =
          method.find("Membership") != std::string::npos ||
          (method.find("Stats") == std::string::npos &&
           method.find("Checkpoint") == std::string::npos &&
           method.find("Restore") == std::string::npos);
      if (!worker_method) {
        const grpc::Status w = CallRaw(channel, method, worker);
        EXPECT_TRUE(w.error_code() == StatusCode::PERMISSION_DENIED ||
                    w.error_code() == StatusCode::UNIMPLEMENTED)
            << w.error_code() << " " << w.error_message();
      }
      ++checked;
    }
  }
  EXPECT_GE(checked, 10);
}

}  // namespace
}  // namespace zeroshard

namespace zeroshard {
namespace {

// --max_state_bytes: a RegisterModel whose state would exceed it is
// refused before anything is allocated; the server stays empty and serves
// a smaller model.
TEST(StateLimitTest, OversizedModelIsRefusedBeforeAllocating) {
  const v1::ModelSpec small = testing::SmallSpec("small", 1);
  v1::ModelSpec huge = small;
  huge.set_job_id("huge");
  v1::TensorSpec* t = huge.add_tensors();
  t->set_name("huge");
  t->add_shape(1ll << 20);
  t->add_shape(1ll << 20);  // 2^40 elements: 16 TiB of fp32 master alone
  auto small_bytes = StateBytes(small, 0);
  ASSERT_TRUE(small_bytes.ok());
  auto huge_bytes = StateBytes(huge, 0);
  ASSERT_TRUE(huge_bytes.ok());
  EXPECT_GT(*huge_bytes, 1ull << 44);
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/state_limit";
  mkdir(dir.c_str(), 0755);
  auto fleet = testing::StartFleet(
      1, {absl::StrCat("--max_state_bytes=", *small_bytes)}, dir);
  ASSERT_NE(fleet, nullptr);
  auto client = testing::Connect(*fleet);
  const absl::Status s = client->RegisterModel(huge);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("--max_state_bytes"), std::string::npos) << s;
  auto stats = client->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ((*stats)[0].spec().job_id(), "");
  EXPECT_TRUE(client->RegisterModel(small).ok());
}

}  // namespace
}  // namespace zeroshard
