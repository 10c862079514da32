// Issue 23, item 8, against a real zeroshard-server with bearer tokens:
// a worker token that puts "\n<a fake audit line>" into a request's job_id
// or a Join's worker_name cannot forge a line of the server's log (every
// client string is escaped, the escaped form is there); and polling
// GetStats, as the launcher does, does not fill the log.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "fleet/local_fleet.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/zeroshard.grpc.pb.h"
#include "tests/testing.h"

namespace zeroshard {
namespace {

constexpr char kWorkerToken[] = "worker-token-0123456789abcdef";
constexpr char kAdminToken[] = "admin-token-0123456789abcdef";
constexpr char kForged[] = "\nzeroshard-server: audit: allowed who=FORGED";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class AuditLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = std::string(tmp ? tmp : "/tmp") + "/audit";
    mkdir(dir_.c_str(), 0700);
    const std::string tokens = dir_ + "/tokens.txt";
    {
      std::ofstream out(tokens);
      out << kWorkerToken << " audit worker audit-workers\n"
          << kAdminToken << " audit admin audit-admin\n";
    }
    chmod(tokens.c_str(), 0600);
    auto binary = WorkspaceBinary("server/zeroshard-server");
    ASSERT_TRUE(binary.ok()) << binary.status();
    FleetOptions fo;
    fo.server_binary = *binary;
    fo.num_shards = 1;
    fo.work_dir = dir_;
    fo.extra_args = {"--threads=1"};
    fo.security_args = {"--insecure", "--token_file=" + tokens};
    auto fleet = LocalFleet::Start(fo);
    ASSERT_TRUE(fleet.ok()) << fleet.status();
    fleet_ = std::move(*fleet);
    channel_ = grpc::CreateChannel(fleet_->addresses()[0],
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::ShardService::NewStub(channel_);
    v1::RegisterModelRequest reg;
    *reg.mutable_spec() = testing::SmallSpec("audit", 1);
    v1::RegisterModelResponse resp;
    auto ctx = Context(kWorkerToken);
    const grpc::Status s = stub_->RegisterModel(ctx.get(), reg, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  static std::unique_ptr<grpc::ClientContext> Context(const char* token) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::seconds(30));
    ctx->AddMetadata("authorization", std::string("Bearer ") + token);
    return ctx;
  }
  std::string Log() const { return ReadFile(dir_ + "/server-0.log"); }

  std::string dir_;
  std::unique_ptr<LocalFleet> fleet_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ShardService::Stub> stub_;
};

TEST_F(AuditLogTest, ClientStringsCannotForgeLogLines) {
  const std::string job = std::string("audit") + kForged;
  {
    v1::PrepareStepRequest req;
    req.set_job_id(job);
    v1::PrepareStepResponse resp;
    auto ctx = Context(kWorkerToken);
    EXPECT_FALSE(stub_->PrepareStep(ctx.get(), req, &resp).ok());
  }
  {
    v1::GetStatsRequest req;
    req.set_job_id(job);
    v1::GetStatsResponse resp;
    auto ctx = Context(kAdminToken);
    (void)stub_->GetStats(ctx.get(), req, &resp);
  }
  auto membership = v1::MembershipService::NewStub(channel_);
  {
    v1::JoinRequest req;
    req.set_job_id("audit");
    req.set_worker_name(std::string("w") + kForged);
    req.set_address(std::string("a") + kForged);
    v1::JoinResponse resp;
    auto ctx = Context(kWorkerToken);
    (void)membership->Join(ctx.get(), req, &resp);
  }
  // The server writes (and flushes) its lines before it answers.
  const std::string log = Log();
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    EXPECT_FALSE(
        absl::StartsWith(line, "zeroshard-server: audit: allowed who=FORGED"))
        << "forged line: " << line;
  }
  EXPECT_TRUE(absl::StrContains(log, "\\nzeroshard-server: audit: allowed"))
      << "the escaped job_id is not in the log:\n"
      << log;
}

// The launcher polls GetStats; 50 polls add at most a few lines.
TEST_F(AuditLogTest, PollingGetStatsDoesNotFillTheLog) {
  const size_t before = Log().size();
  for (int i = 0; i < 50; ++i) {
    v1::GetStatsRequest req;
    req.set_job_id("audit");
    v1::GetStatsResponse resp;
    auto ctx = Context(kAdminToken);
    ASSERT_TRUE(stub_->GetStats(ctx.get(), req, &resp).ok());
  }
  const std::string added = Log().substr(before);
  const size_t lines = std::count(added.begin(), added.end(), '\n');
  EXPECT_LE(lines, 5u) << "50 GetStats calls added " << lines << " lines:\n"
                       << added.substr(0, 2000);
}

}  // namespace
}  // namespace zeroshard
