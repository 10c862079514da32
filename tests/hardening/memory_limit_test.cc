// Issue 23 item 1: a RegisterModel that the server cannot hold crashed it.
// A real zeroshard-server runs under a 1.5 GiB address-space limit
// (`ulimit -v` in /bin/sh, then exec); a model of 1e8 parameters (18 bytes
// each on one shard: 1.8e9 bytes) must be refused with RESOURCE_EXHAUSTED
// naming the bytes asked and the limit, and the server must stay up and
// unchanged:
//   DefaultLimit: the default --max_state_bytes follows RLIMIT_AS, so the
//     request guard refuses it; a model registered before gathers the same.
//   AllocationCheck: --max_state_bytes far above what can be allocated,
//     so the allocation itself fails: still RESOURCE_EXHAUSTED (no
//     SIGSEGV/abort), and a small model registers and gathers afterwards.
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/shard_client.h"
#include "common/subprocess.h"
#include "fleet/local_fleet.h"
#include "gtest/gtest.h"
#include "tests/testing.h"

namespace zeroshard {
namespace {

constexpr uint64_t kAddressSpaceBytes = 1536ull << 20;  // 1.5 GiB
constexpr uint64_t kBigParams = 100000000;              // 1e8
constexpr uint64_t kBigStateBytes = kBigParams * 18;    // p m v g + serve

struct LimitedServer {
  Subprocess process;
  std::string address;
  std::string log;
};

// Starts one server (shard 0 of 1) with RLIMIT_AS = kAddressSpaceBytes.
LimitedServer StartLimited(const std::string& name,
                           std::vector<std::string> extra) {
  auto binary = WorkspaceBinary("server/zeroshard-server");
  EXPECT_TRUE(binary.ok()) << binary.status();
  // Logs are kept with the test's outputs when Bazel keeps them.
  const char* out = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = out != nullptr ? out : tmp != nullptr ? tmp : "/tmp";
  const std::string port_file =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name, ".port");
  std::remove(port_file.c_str());
  SpawnOptions spawn;
  spawn.argv = {"/bin/sh",
                "-c",
                absl::StrCat("ulimit -v ", kAddressSpaceBytes / 1024,
                             " && exec \"$0\" \"$@\""),
                *binary,
                "--host=127.0.0.1",
                "--port=0",
                "--port_file=" + port_file,
                "--insecure",
                "--threads=1",
                "--grpc_threads=4"};
  for (std::string& a : extra) spawn.argv.push_back(std::move(a));
  spawn.log_path = absl::StrCat(dir, "/", name, ".log");
  auto process = Subprocess::Spawn(spawn);
  EXPECT_TRUE(process.ok()) << process.status();
  LimitedServer s{std::move(*process), "", spawn.log_path};
  // Poll for the port file (written once the server listens), 60 s at most.
  for (int i = 0; i < 1200 && s.process.running(); ++i) {
    std::ifstream in(port_file);
    int port = 0;
    if (in >> port && port > 0) {
      s.address = absl::StrCat("127.0.0.1:", port);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    s.process.Poll();
  }
  EXPECT_FALSE(s.address.empty()) << "server did not start; see " << s.log;
  return s;
}

std::unique_ptr<ShardClient> ConnectTo(const LimitedServer& s) {
  ClientOptions o;
  o.addresses = {s.address};
  o.deadline = std::chrono::milliseconds(60000);
  o.max_attempts = 1;  // a dead server must show, not be retried
  auto client = ShardClient::Connect(o);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? std::move(*client) : nullptr;
}

v1::ModelSpec BigSpec(const std::string& job) {
  v1::ModelSpec spec = testing::SmallSpec(job, 1);
  spec.clear_tensors();
  v1::TensorSpec* t = spec.add_tensors();
  t->set_name("big");
  t->add_shape(10000);
  t->add_shape(kBigParams / 10000);
  t->set_param_group(0);
  return spec;
}

v1::ModelSpec SeededSmallSpec(const std::string& job) {
  v1::ModelSpec spec = testing::SmallSpec(job, 1);
  spec.mutable_init()->set_seed(23);
  spec.mutable_init()->set_std(0.02);
  return spec;
}

std::vector<float> GatherAll(ShardClient* c) {
  std::vector<float> out(c->plan().total());
  absl::Status s =
      c->Gather(Range{0, c->plan().total()}, v1::DTYPE_FP32, out.data());
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

// The server is still alive and answers.
void ExpectAlive(LimitedServer* s, ShardClient* c) {
  EXPECT_FALSE(s->process.Poll().has_value())
      << "server exited: " << DescribeWaitStatus(s->process.Poll().value_or(0))
      << "; see " << s->log;
  auto stats = c->Stats();
  EXPECT_TRUE(stats.ok()) << stats.status();
}

TEST(MemoryLimitTest, DefaultLimitFollowsRlimitAs) {
  LimitedServer server = StartLimited("default", {});
  ASSERT_FALSE(server.address.empty());
  auto big = ConnectTo(server);
  ASSERT_NE(big, nullptr);
  auto expect_refused = [&] {
    absl::Status s = big->RegisterModel(BigSpec("mem"));
    std::printf("refused: %s\n", s.ToString().c_str());
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_NE(s.message().find(absl::StrCat(kBigStateBytes)), std::string::npos)
        << s;
    EXPECT_NE(s.message().find("allows"), std::string::npos) << s;
  };
  expect_refused();  // on an empty server

  auto small = ConnectTo(server);
  ExpectAlive(&server, small.get());
  ASSERT_TRUE(small->RegisterModel(SeededSmallSpec("mem")).ok());
  const std::vector<float> before = GatherAll(small.get());
  expect_refused();  // beside a registered model, which stays as it was
  ExpectAlive(&server, small.get());
  EXPECT_EQ(testing::FirstBitDifference(before, GatherAll(small.get())), -1);
}

TEST(MemoryLimitTest, FailedAllocationIsResourceExhausted) {
  LimitedServer server =
      StartLimited("alloc", {"--max_state_bytes=100000000000"});
  ASSERT_FALSE(server.address.empty());
  auto big = ConnectTo(server);
  ASSERT_NE(big, nullptr);
  absl::Status s = big->RegisterModel(BigSpec("mem"));
  std::printf("refused: %s\n", s.ToString().c_str());
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find(absl::StrCat(kBigParams * 4)), std::string::npos)
      << s;

  auto small = ConnectTo(server);
  ExpectAlive(&server, small.get());
  ASSERT_TRUE(small->RegisterModel(SeededSmallSpec("mem")).ok());
  const std::vector<float> first = GatherAll(small.get());
  EXPECT_NE(first[0], 0.0f);  // the seeded init ran
  EXPECT_EQ(testing::FirstBitDifference(first, GatherAll(small.get())), -1);
}

}  // namespace
}  // namespace zeroshard
