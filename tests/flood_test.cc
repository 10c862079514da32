// Issue 8's limits under a flood: many clients push large gradients into
// one real zeroshard-server at once, round after round. The server's
// memory (VmHWM from /proc) stays under the model state it holds plus
// --max_inflight_bytes plus a fixed baseline, and every push, prepare and
// commit eventually succeeds (flow control makes senders wait; nothing is
// refused).
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/security.h"
#include "client/shard_client.h"
#include "common/metrics/process_metrics.h"
#include "fleet/local_fleet.h"
#include "gtest/gtest.h"
#include "tests/testing.h"

namespace zeroshard {
namespace {

constexpr int kClients = 16;
constexpr int kRounds = 3;
constexpr uint64_t kElements = 8u << 20;  // 32 MiB of fp32 per push
constexpr int64_t kInflightBytes = 64ll << 20;
// Threads, arenas, code and gRPC's fixed buffers of an idle server with
// this many connections, beyond the baseline measured before the flood.
constexpr int64_t kSlackBytes = 32ll << 20;

// VmHWM or VmRSS of `pid`, in bytes (tests/testing.h).
int64_t ProcBytes(int pid, const std::string& field) {
  return static_cast<int64_t>(metrics::ProcStatusBytes(pid, field));
}

v1::ModelSpec FloodSpec() {
  v1::ModelSpec spec = testing::SmallSpec("flood", 1);
  spec.clear_tensors();
  v1::TensorSpec* t = spec.add_tensors();
  t->set_name("w");
  t->add_shape(kElements);
  t->set_param_group(0);
  spec.set_contributions_per_step(kClients);
  return spec;
}

TEST(FloodTest, MemoryStaysBoundedAndEveryPushSucceeds) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/flood";
  mkdir(dir.c_str(), 0755);
  const std::string tokens = dir + "/tokens.txt", token = dir + "/w.token";
  std::ofstream(tokens) << "flood-worker-token-0123456789 flood worker\n";
  std::ofstream(token) << "flood-worker-token-0123456789\n";
  chmod(tokens.c_str(), 0600);  // the server refuses a readable token file
  auto binary = WorkspaceBinary("server/zeroshard-server");
  ASSERT_TRUE(binary.ok()) << binary.status();
  FleetOptions fo;
  fo.server_binary = *binary;
  fo.num_shards = 1;
  fo.work_dir = dir;
  fo.extra_args = {"--threads=1", "--grpc_threads=8"};
  fo.security_args = {"--insecure", "--token_file=" + tokens,
                      absl::StrCat("--max_inflight_bytes=", kInflightBytes),
                      "--max_streams_per_connection=4"};
  auto fleet = LocalFleet::Start(fo);
  ASSERT_TRUE(fleet.ok()) << fleet.status();
  const int pid = (*fleet)->server(0).pid();

  ClientSecurityFlags sec;
  sec.insecure = true;
  sec.token_file = token;
  std::vector<std::unique_ptr<ShardClient>> clients;
  for (int c = 0; c < kClients; ++c) {
    ClientOptions o;
    o.addresses = (*fleet)->addresses();
    o.deadline = std::chrono::milliseconds(120000);
    o.max_piece_bytes = 1u << 20;  // 32 streams per push
    ASSERT_TRUE(ApplyClientSecurity(sec, &o).ok());
    auto client = ShardClient::Connect(o);
    ASSERT_TRUE(client.ok()) << client.status();
    clients.push_back(std::move(*client));
  }
  const v1::ModelSpec spec = FloodSpec();
  ASSERT_TRUE(clients[0]->RegisterModel(spec).ok());
  for (auto& c : clients) ASSERT_TRUE(c->UseSpec(spec).ok());
  const Range all{0, kElements};
  std::mt19937_64 rng(3);
  // One gradient for every client (the server sums kClients copies).
  const std::vector<float> grad = testing::RandomVector(rng, kElements, 0.01f);
  auto push = [&](int c, uint64_t step) {
    return clients[c]->Push(all, v1::DTYPE_FP32, grad.data(),
                            PushId{0, step, static_cast<uint32_t>(c),
                                   absl::StrCat("c", c, "/", step)});
  };
  auto commit = [&](uint64_t step) {
    auto norm = clients[0]->Prepare(0, step);
    ASSERT_TRUE(norm.ok()) << norm.status();
    absl::Status s = clients[0]->Commit(0, step, 1.0f, 1e-3, false);
    ASSERT_TRUE(s.ok()) << s;
  };
  // Warm-up step, one push at a time: every buffer of the state touched.
  for (int c = 0; c < kClients; ++c) ASSERT_TRUE(push(c, 0).ok());
  commit(0);
  const int64_t baseline = ProcBytes(pid, "VmRSS");
  const int64_t warm_peak = ProcBytes(pid, "VmHWM");

  for (uint64_t step = 1; step <= kRounds; ++step) {
    std::vector<absl::Status> results(kClients);
    std::vector<std::thread> threads;
    for (int c = 0; c < kClients; ++c) {
      threads.emplace_back([&, c] { results[c] = push(c, step); });
    }
    for (auto& t : threads) t.join();
    for (int c = 0; c < kClients; ++c) {
      EXPECT_TRUE(results[c].ok()) << "client " << c << ": " << results[c];
    }
    commit(step);
  }
  const int64_t peak = ProcBytes(pid, "VmHWM");
  auto stats = clients[0]->Stats();  // a worker token: refused
  EXPECT_EQ(stats.status().code(), absl::StatusCode::kPermissionDenied);
  std::printf(
      "flood: %d clients x %d rounds x %llu MiB pushes; server RSS before "
      "%.1f MiB (peak %.1f), peak after %.1f MiB: +%.1f MiB over the "
      "baseline; bound --max_inflight_bytes %lld MiB + %lld MiB slack\n",
      kClients, kRounds, static_cast<unsigned long long>(kElements * 4 >> 20),
      baseline / 1048576.0, warm_peak / 1048576.0, peak / 1048576.0,
      (peak - baseline) / 1048576.0,
      static_cast<long long>(kInflightBytes >> 20),
      static_cast<long long>(kSlackBytes >> 20));
  EXPECT_LE(peak - baseline, kInflightBytes + kSlackBytes);
  std::vector<float> params(kElements);
  uint64_t step = 0;
  ASSERT_TRUE(
      clients[0]->Gather(all, v1::DTYPE_FP32, params.data(), &step).ok());
  EXPECT_EQ(step, static_cast<uint64_t>(kRounds + 1));
}

}  // namespace
}  // namespace zeroshard
