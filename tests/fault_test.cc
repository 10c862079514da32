// "Nothing lost" under injected faults, with real processes: `zeroshard
// train` (2 zeroshard-worker processes over UCX, ZeRO-3) against 2
// real zeroshard-server processes, 200 steps of a tiny GPT-2.
//
//   * Random faults on ~5% of the RPCs each way (workers: drop, dup, delay;
//     servers: lose, dup, delay answers) plus named ones (the 3rd commit's
//     answer lost, the 7th commit sent twice, a slow reduce-scatter): the
//     run completes and its final parameters equal the fault-free run's bit
//     for bit, and the servers counted the duplicates they ignored.
//   * An injected failure (a commit, a collective) stops the job with an
//     error naming the fault, not a hang.
// The workers get their spec through ZEROSHARD_FAULTS (the launcher passes
// its environment on), the servers through --fault_spec.
#include <sys/stat.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/subprocess.h"
#include "fleet/local_fleet.h"
#include "gtest/gtest.h"
#include "tests/testing.h"
#include "worker/io/model_file.h"
#include "worker/io/token_file.h"

namespace zeroshard {
namespace {

constexpr int kSteps = 200;

std::string TempDir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d != nullptr ? d : "/tmp";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

struct TrainRun {
  int exit_code = -1;
  std::string output;               // the launcher's
  std::string worker_logs;          // every rank's log
  std::vector<float> params;        // the saved model
  uint64_t duplicates_ignored = 0;  // summed over the servers
  uint64_t steps_on_servers = 0;    // shard 0's step
};

// One `zeroshard train` of `steps` steps: workers with ZEROSHARD_FAULTS =
// `worker_faults`, fresh servers with --fault_spec=`server_faults`.
TrainRun Train(const std::string& name, const std::string& worker_faults,
               const std::string& server_faults, int steps = kSteps) {
  TrainRun run;
  auto launcher = WorkspaceBinary("launcher/zeroshard");
  auto server = WorkspaceBinary("server/zeroshard-server");
  EXPECT_TRUE(launcher.ok() && server.ok());
  if (!launcher.ok() || !server.ok()) return run;
  const std::string dir = TempDir() + "/" + name;
  // Pseudo-random tokens of a 64-word vocabulary.
  const std::string tokens = TempDir() + "/fault_test_tokens.bin";
  std::vector<uint16_t> ids(8192);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = (i * 2654435761u >> 7) % 64;
  const absl::Status written = io::WriteTokenFile(tokens, ids);
  EXPECT_TRUE(written.ok()) << written;
  const std::string config = TempDir() + "/fault_test_ds.json";
  // ZeRO-3, micro-batch 2, AdamW with clipping; 2 servers.
  std::ofstream(config)
      << R"({"train_micro_batch_size_per_gpu": 2, "gradient_clipping": 1.0,)"
      << R"( "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}},)"
      << R"( "zero_optimization": {"stage": 3}, "zeroshard": {"servers": 2}})";
  std::vector<std::string> extra = {"--threads=1", "--grpc_threads=8"};
  if (!server_faults.empty()) extra.push_back("--fault_spec=" + server_faults);
  mkdir((dir + "-servers").c_str(), 0755);
  std::unique_ptr<LocalFleet> fleet =
      testing::StartFleet(2, extra, dir + "-servers");
  if (fleet == nullptr) return run;
  SpawnOptions o;
  const std::string out = dir + "/final.bin";
  o.argv = {*launcher,
            "train",
            "--config=" + config,
            "--data=" + tokens,
            "--layers=1",
            "--heads=2",
            "--channels=32",
            "--vocab=64",
            "--seq_len=16",
            "--workers=2",
            "--server_addrs=" + absl::StrJoin(fleet->addresses(), ","),
            absl::StrCat("--steps=", steps),
            "--print_every=50",
            "--save=" + out,
            "--work_dir=" + dir};
  if (!worker_faults.empty()) o.env = {"ZEROSHARD_FAULTS=" + worker_faults};
  o.log_path = dir + ".log";
  auto p = Subprocess::Spawn(o);
  EXPECT_TRUE(p.ok()) << p.status();
  if (!p.ok()) return run;
  auto status = p->Wait(std::chrono::seconds(300));
  EXPECT_TRUE(status.ok()) << name << ": the launcher hangs";
  if (!status.ok()) return run;
  run.exit_code = WIFEXITED(*status) ? WEXITSTATUS(*status) : 128;
  run.output = ReadFile(o.log_path);
  run.worker_logs =
      ReadFile(dir + "/rank-0.log") + ReadFile(dir + "/rank-1.log");
  if (run.exit_code == 0) {
    auto model = io::ReadModelFile(out);
    EXPECT_TRUE(model.ok()) << model.status();
    if (model.ok()) run.params = model->params;
  }
  auto client = testing::Connect(*fleet);
  auto stats = client->Stats();
  EXPECT_TRUE(stats.ok()) << stats.status();
  if (stats.ok()) {
    for (const auto& s : *stats)
      run.duplicates_ignored += s.duplicates_ignored();
    run.steps_on_servers = (*stats)[0].step();
  }
  return run;
}

// The count of `action` in the "fault injection: ..." lines of `log`.
uint64_t Injected(const std::string& log, const std::string& action) {
  uint64_t total = 0;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    const size_t at = line.find(absl::StrCat(" ", action, " "));
    if (line.find("fault injection: ") == absl::string_view::npos ||
        at == absl::string_view::npos) {
      continue;
    }
    total += std::strtoull(
        std::string(line.substr(at + action.size() + 2)).c_str(), nullptr, 10);
  }
  return total;
}

TEST(FaultTest, RandomAndNamedFaultsLeaveTheBitsOfTheFaultFreeRun) {
  const TrainRun clean = Train("clean", "", "");
  ASSERT_EQ(clean.exit_code, 0) << clean.output;
  ASSERT_FALSE(clean.params.empty());
  EXPECT_EQ(clean.duplicates_ignored, 0u);
  const TrainRun faulty =
      Train("faulty",
            "seed=7,drop=0.05,dup=0.05,delay=0.05:20ms,dup_at=CommitStep#7,"
            "delay_at=ReduceScatter#10:50ms",
            "seed=8,lose=0.05,dup=0.05,delay=0.05:5ms,lose_at=CommitStep#3");
  ASSERT_EQ(faulty.exit_code, 0) << faulty.output;
  EXPECT_EQ(faulty.steps_on_servers, static_cast<uint64_t>(kSteps));
  ASSERT_EQ(faulty.params.size(), clean.params.size());
  EXPECT_EQ(testing::FirstBitDifference(faulty.params, clean.params), -1);
  // The faults did happen: each kind on the workers, and the servers saw
  // repeated pushes (lost answers, retried with the same key).
  EXPECT_GT(Injected(faulty.worker_logs, "drop"), 0u) << faulty.worker_logs;
  EXPECT_GT(Injected(faulty.worker_logs, "dup"), 0u);
  EXPECT_GT(Injected(faulty.worker_logs, "delay"), 0u);
  EXPECT_GT(faulty.duplicates_ignored, 0u);
  std::printf(
      "faults injected by the workers: drop %lu, dup %lu, delay %lu; "
      "duplicate pushes ignored by the servers: %lu\n",
      static_cast<unsigned long>(Injected(faulty.worker_logs, "drop")),
      static_cast<unsigned long>(Injected(faulty.worker_logs, "dup")),
      static_cast<unsigned long>(Injected(faulty.worker_logs, "delay")),
      static_cast<unsigned long>(faulty.duplicates_ignored));
}

// The exactly-once case the random faults found: a push is applied, its
// answer is lost, the step is committed meanwhile, and the client's retry
// (same key) arrives for the step just committed. It must be acknowledged
// and ignored, not refused as stale; a new key for that step still is.
TEST(FaultTest, APushRetriedAfterItsStepWasCommittedIsAcknowledged) {
  std::unique_ptr<LocalFleet> fleet = testing::StartFleet(2);
  ASSERT_NE(fleet, nullptr);
  auto client = testing::Connect(*fleet);
  const v1::ModelSpec spec = testing::SmallSpec("retry_after_commit", 2);
  ASSERT_TRUE(client->RegisterModel(spec).ok());
  const Range all{0, client->plan().total()};
  std::vector<float> g(all.size(), 0.25f), before(all.size()),
      after(all.size());
  const PushId id{0, 0, 0, "w0/s0"};
  ASSERT_TRUE(client->Push(all, v1::DTYPE_FP32, g.data(), id).ok());
  ASSERT_TRUE(client->Prepare(0, 0).ok());
  ASSERT_TRUE(client->Commit(0, 0, 1.0f, 1e-2, false).ok());
  ASSERT_TRUE(client->Gather(all, v1::DTYPE_FP32, before.data()).ok());
  const absl::Status retry = client->Push(all, v1::DTYPE_FP32, g.data(), id);
  EXPECT_TRUE(retry.ok()) << retry;
  const absl::Status other =
      client->Push(all, v1::DTYPE_FP32, g.data(), PushId{0, 0, 0, "w1/s0"});
  EXPECT_EQ(other.code(), absl::StatusCode::kFailedPrecondition) << other;
  ASSERT_TRUE(client->Gather(all, v1::DTYPE_FP32, after.data()).ok());
  EXPECT_EQ(testing::FirstBitDifference(before, after), -1);
  auto stats = client->Stats();
  ASSERT_TRUE(stats.ok());
  uint64_t duplicates = 0;
  for (const auto& st : *stats) duplicates += st.duplicates_ignored();
  EXPECT_EQ(duplicates, client->plan().Split(all).size());
}

// A failure that retries cannot hide ends the job with the fault named.
TEST(FaultTest, AnInjectedFailureStopsTheJobWithAClearError) {
  const TrainRun commit = Train("fail_commit", "fail_at=CommitStep#3", "", 10);
  EXPECT_EQ(commit.exit_code, 1);
  EXPECT_NE(commit.output.find("INTERNAL: CommitStep on shard"),
            std::string::npos)
      << commit.output;
  EXPECT_NE(commit.output.find("fault injection: "
                               "/zeroshard.v1.ShardService/CommitStep not "
                               "sent (fail_at=CommitStep#3)"),
            std::string::npos)
      << commit.output;
  const TrainRun collective =
      Train("fail_allgather", "fail_at=AllGather#5", "", 10);
  EXPECT_EQ(collective.exit_code, 1);
  EXPECT_NE(collective.output.find("fault injection: AllGather on rank"),
            std::string::npos)
      << collective.output;
  EXPECT_NE(collective.output.find("failed (fail_at=AllGather#5)"),
            std::string::npos);
}

}  // namespace
}  // namespace zeroshard
