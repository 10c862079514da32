// Issue 23 item 14, real processes: two zeroshard-server processes and
// zeroshard-worker --elastic processes (ZeRO-3, a tiny model, a few steps).
//
//   - PermanentErrorEndsTheJobOnEveryMember: w1's data file holds token ids
//     >= the vocabulary (INVALID_ARGUMENT, a permanent error). Wanted: both
//     workers exit nonzero (they used to form new groups forever), both
//     print the message naming the bad token, and the servers' committed
//     step is what it was before (no step was applied).
//   - JoinerOfAFinishedJobExitsZero: w0 and w1 run the job to --steps; a
//     third worker started afterwards with the same flags says the job
//     finished and exits 0 (it used to wait "for 2 workers" until
//     --elastic_timeout), and commits nothing.
//   - ModelThatDoesNotMatchTheServersEndsTheJob: after that, two workers
//     with another model (one layer, not two) both exit nonzero naming
//     the difference.
//   - ServerKilledMidRunIsTransient: a shard server is killed (SIGKILL)
//     and restarted while two workers train; it comes back from its last
//     checkpoint. Wanted: the job goes on (rolled back to the checkpoint,
//     a transient error) and both workers finish at --steps with exit 0.
// The transient path of a killed peer (the group re-formed) is
// //worker/elastic:elastic_test.
//
// Deadlines are failure guards only (a loaded 2-core machine): each test
// takes a few seconds when it passes.
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/shard_client.h"
#include "common/subprocess.h"
#include "fleet/local_fleet.h"
#include "gtest/gtest.h"
#include "worker/engine/testing.h"

namespace zeroshard {
namespace {

constexpr int kSteps = 3;
constexpr auto kGuard = std::chrono::seconds(120);

std::string TempDir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d != nullptr ? d : "/tmp";
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The last "zeroshard-worker: ..." line of a worker's log: the error it
// exits with (UCX may log warnings after it).
std::string ExitLine(const std::string& log) {
  std::istringstream in(log);
  std::string line, last;
  while (std::getline(in, line)) {
    if (line.rfind("zeroshard-worker: ", 0) == 0) last = line;
  }
  return last;
}

// One elastic job: 2 servers (--lease_ms=1500, checkpoints on) and the
// flags every worker of the job shares.
class ElasticJob {
 public:
  explicit ElasticJob(const std::string& name) : dir_(TempDir() + "/" + name) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ + "/ckpt");
    auto worker = WorkspaceBinary("worker/train/zeroshard-worker");
    EXPECT_TRUE(worker.ok()) << worker.status();
    if (worker.ok()) worker_ = *worker;
    fleet_ = engine::StartTestFleet(
        2, {"--lease_ms=1500", "--checkpoint_dir=" + dir_ + "/ckpt"});
    EXPECT_TRUE(fleet_.ok()) << fleet_.status();
    spec_ = engine::TinySpec(3, false, name);
    spec_.steps = kSteps;
    auto good = engine::WriteTestTokens(name + "_good", 1 << 14,
                                        spec_.config.vocab_size, 5);
    EXPECT_TRUE(good.ok()) << good.status();
    if (good.ok()) good_data_ = *good;
    spec_.data = {good_data_};
  }

  bool ok() const { return fleet_.ok() && !worker_.empty(); }
  const std::string& good_data() const { return good_data_; }
  const train::TrainSpec& spec() const { return spec_; }
  std::string log(const std::string& w) const {
    return dir_ + "/" + w + ".log";
  }

  // Starts worker `name` reading `data`.
  void Start(const std::string& name, const std::string& data) {
    train::TrainSpec s = spec_;
    s.data = {data};
    Start(name, s);
  }
  // Starts worker `name` with the flags of `s`.
  void Start(const std::string& name, const train::TrainSpec& s) {
    SpawnOptions o;
    o.argv = {worker_, "--worker_name=" + name};
    for (const std::string& f :
         engine::TrainWorkerFlags(s, dir_ + "/" + name + "_ds.json")) {
      o.argv.push_back(f);
    }
    for (const char* f : {"--checkpoint_interval=2", "--elastic",
                          "--start_workers=2", "--min_workers=2",
                          "--collective_timeout=20", "--elastic_timeout=90"}) {
      o.argv.push_back(f);
    }
    o.argv.push_back("--servers=" + absl::StrJoin((*fleet_)->addresses(), ","));
    o.log_path = log(name);
    auto p = Subprocess::Spawn(o);
    ASSERT_TRUE(p.ok()) << p.status();
    procs_.emplace(name, std::move(*p));
  }

  // The exit status of `name` (-1: still running after kGuard; it is
  // killed).
  int Wait(const std::string& name) {
    auto status = procs_.at(name).Wait(kGuard);
    if (!status.ok()) {
      ADD_FAILURE() << name << " still runs after the guard deadline: "
                    << status.status() << " (log " << log(name) << ")";
      return -1;
    }
    return *status;
  }

  // Kills server k with SIGKILL and starts it again (LocalFleet::Restart).
  absl::Status RestartServer(uint32_t k) { return (*fleet_)->Restart(k); }

  // The servers' committed steps (one per server); with `restored`, the
  // step each restored last (at start or by a Restore RPC) instead.
  std::vector<uint64_t> Steps(bool restored = false) {
    ClientOptions o;
    o.addresses = (*fleet_)->addresses();
    auto client = ShardClient::Connect(o);
    EXPECT_TRUE(client.ok()) << client.status();
    if (!client.ok()) return {};
    auto stats = (*client)->Stats();
    EXPECT_TRUE(stats.ok()) << stats.status();
    std::vector<uint64_t> out;
    if (stats.ok()) {
      for (const v1::GetStatsResponse& s : *stats) {
        out.push_back(restored ? s.restored_step() : s.step());
      }
    }
    return out;
  }

 private:
  std::string dir_, worker_, good_data_;
  train::TrainSpec spec_;
  absl::StatusOr<std::unique_ptr<LocalFleet>> fleet_;
  std::map<std::string, Subprocess> procs_;
};

TEST(ElasticPermanentTest, PermanentErrorEndsTheJobOnEveryMember) {
  ElasticJob job("elastic_bad_data");
  ASSERT_TRUE(job.ok());
  // Ids up to 300 in a vocabulary of spec().config.vocab_size (64).
  ASSERT_LT(job.spec().config.vocab_size, 300);
  auto bad = engine::WriteTestTokens("elastic_bad_tokens", 1 << 14, 300, 6);
  ASSERT_TRUE(bad.ok()) << bad.status();
  const std::vector<uint64_t> before = job.Steps();

  job.Start("w0", job.good_data());
  job.Start("w1", *bad);
  const int w0 = job.Wait("w0");
  const int w1 = job.Wait("w1");
  EXPECT_TRUE(WIFEXITED(w0) && WEXITSTATUS(w0) != 0)
      << "w0: " << DescribeWaitStatus(w0) << "\n"
      << ReadAll(job.log("w0"));
  EXPECT_TRUE(WIFEXITED(w1) && WEXITSTATUS(w1) != 0)
      << "w1: " << DescribeWaitStatus(w1) << "\n"
      << ReadAll(job.log("w1"));
  for (const char* w : {"w0", "w1"}) {
    const std::string out = ReadAll(job.log(w));
    // The error it exits with (its "zeroshard-worker:" line) names the
    // file and the problem.
    const std::string last = ExitLine(out);
    EXPECT_NE(last.find("elastic_bad_tokens"), std::string::npos)
        << w << " does not name the bad file:\n"
        << out;
    EXPECT_NE(last.find("is not below vocab_size"), std::string::npos)
        << w << " does not say what is wrong:\n"
        << out;
  }
  EXPECT_EQ(job.Steps(), before) << "a step was committed";
}

TEST(ElasticPermanentTest, JoinerOfAFinishedJobExitsZero) {
  ElasticJob job("elastic_finished");
  ASSERT_TRUE(job.ok());
  job.Start("w0", job.good_data());
  job.Start("w1", job.good_data());
  ASSERT_EQ(job.Wait("w0"), 0) << ReadAll(job.log("w0"));
  ASSERT_EQ(job.Wait("w1"), 0) << ReadAll(job.log("w1"));
  const std::vector<uint64_t> done = job.Steps();
  ASSERT_EQ(done, std::vector<uint64_t>(2, kSteps));

  job.Start("late", job.good_data());
  const int late = job.Wait("late");
  const std::string out = ReadAll(job.log("late"));
  EXPECT_EQ(late, 0) << DescribeWaitStatus(late) << "\n" << out;
  EXPECT_NE(out.find("finished"), std::string::npos) << out;
  EXPECT_EQ(job.Steps(), done);
}

// After a finished job, two workers come with a model of one layer where
// the servers hold two: both exit nonzero naming the difference, within
// seconds (it used to take --elastic_timeout), and commit nothing.
TEST(ElasticPermanentTest, ModelThatDoesNotMatchTheServersEndsTheJob) {
  ElasticJob job("elastic_other_model");
  ASSERT_TRUE(job.ok());
  job.Start("w0", job.good_data());
  job.Start("w1", job.good_data());
  ASSERT_EQ(job.Wait("w0"), 0) << ReadAll(job.log("w0"));
  ASSERT_EQ(job.Wait("w1"), 0) << ReadAll(job.log("w1"));
  const std::vector<uint64_t> done = job.Steps();

  train::TrainSpec other = job.spec();
  other.config.num_layers = 1;
  other.steps = 2 * kSteps;
  job.Start("x0", other);
  job.Start("x1", other);
  for (const char* w : {"x0", "x1"}) {
    const int status = job.Wait(w);
    const std::string out = ReadAll(job.log(w));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0)
        << w << ": " << DescribeWaitStatus(status) << "\n"
        << out;
    // The error it exits with (its "zeroshard-worker:" line) names the
    // difference.
    const std::string last = ExitLine(out);
    EXPECT_NE(last.find("a different model is already registered"),
              std::string::npos)
        << w << "\n"
        << out;
  }
  EXPECT_EQ(job.Steps(), done);
}

// A server lost and restarted mid-run is an unreachable server, then one
// awaiting a rollback: transient, the job must not end.
TEST(ElasticPermanentTest, ServerKilledMidRunIsTransient) {
  ElasticJob job("elastic_server_restart");
  ASSERT_TRUE(job.ok());
  train::TrainSpec s = job.spec();
  s.steps = 40;
  job.Start("w0", s);
  job.Start("w1", s);
  // After the checkpoint of step 2 (--checkpoint_interval=2) and a step
  // more, wherever the servers are in their work.
  const auto give_up = std::chrono::steady_clock::now() + kGuard;
  std::vector<uint64_t> steps;
  while (std::chrono::steady_clock::now() < give_up) {
    steps = job.Steps();
    if (!steps.empty() && steps[1] >= 3) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_FALSE(steps.empty());
  ASSERT_GE(steps[1], 3u) << "the job did not reach step 3";
  ASSERT_LT(steps[1], 40u) << "the job finished before the server was lost";
  const absl::Status restarted = job.RestartServer(1);
  ASSERT_TRUE(restarted.ok()) << restarted;
  for (const char* w : {"w0", "w1"}) {
    const int status = job.Wait(w);
    EXPECT_EQ(status, 0) << w << ": " << DescribeWaitStatus(status) << "\n"
                         << ReadAll(job.log(w));
  }
  EXPECT_EQ(job.Steps(), std::vector<uint64_t>(2, 40));
  // The job really rolled back: the restarted server came back from a
  // checkpoint (step 2 or later) and the job restored it.
  const std::vector<uint64_t> restored = job.Steps(/*restored=*/true);
  ASSERT_EQ(restored.size(), 2u);
  EXPECT_GE(restored[1], 2u);
}

}  // namespace
}  // namespace zeroshard
