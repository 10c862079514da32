// Real processes: W zeroshard-worker processes over UCX on loopback
// (W=2 flat, W=4 as 2 nodes x 2 local ranks) and K=2 real shard servers,
// stage 3 (and 3 + offload, 3 in fp16 with a dynamic loss scale, and 2 with
// server-side aggregation),
// configured by a DeepSpeed JSON config and
// reading a token file, must end with the bits of the in-process run of the
// same spec (threads, flat collectives, testing.h). The ranks learn their
// place from the launcher's ZEROSHARD_* variables, or from torchrun's
// (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR/PORT) alone;
// a worker with neither fails naming both and --elastic.
//
// The device path in processes (DeviceProcessesTest): two single-rank
// nodes joined by UCX, stages 0-3, 2 in bf16 and 3 with five blocks in a
// device pool of two (copies lagging 1 ms on the host-emulated device),
// with --device=
// host-emulated the bits of the in-process CPU run (every CI run), with
// --device=cuda (the GPU check kit; skipped without a GPU) rank 0's
// per-step loss and gradient norm within cuda_engine_test's tolerances.
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/cuda/device.h"
#include "common/subprocess.h"
#include "fleet/local_fleet.h"
#include "gtest/gtest.h"
#include "worker/engine/testing.h"
#include "worker/io/model_file.h"

namespace zeroshard::train {
namespace {

std::string TempDir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d != nullptr ? d : "/tmp";
}

// Real token files (the binary's --data and io::DataLoader on both sides).
TrainSpec Spec(int stage, bool offload, bool aggregate) {
  TrainSpec s = engine::TinySpec(stage, offload, "multiprocess_test");
  s.zero.server_aggregation = aggregate;
  s.steps = 4;
  s.seed = 5;
  auto tokens = engine::WriteTestTokens("multiprocess_tokens", 4096, 64, 5);
  EXPECT_TRUE(tokens.ok()) << tokens.status();
  if (tokens.ok()) s.data = {*tokens};
  return s;
}

// The environment of rank `r`: the launcher's names or torchrun's.
std::vector<std::string> RankEnv(bool torchrun, int r, int world, int local,
                                 const std::string& coord) {
  if (!torchrun) {
    return {absl::StrCat("ZEROSHARD_RANK=", r),
            absl::StrCat("ZEROSHARD_WORLD_SIZE=", world),
            absl::StrCat("ZEROSHARD_LOCAL_RANK=", r % local),
            absl::StrCat("ZEROSHARD_LOCAL_SIZE=", local),
            "ZEROSHARD_COORD=" + coord};
  }
  const size_t colon = coord.rfind(':');
  return {absl::StrCat("RANK=", r),
          absl::StrCat("WORLD_SIZE=", world),
          absl::StrCat("LOCAL_RANK=", r % local),
          absl::StrCat("LOCAL_WORLD_SIZE=", local),
          "MASTER_ADDR=" + coord.substr(0, colon),
          "MASTER_PORT=" + coord.substr(colon + 1)};
}

// What rank 0 of a run in processes left: its final parameters and, from
// its metrics file, each step's loss (averaged over the ranks) and
// gradient norm.
struct Processes {
  std::vector<float> params;
  std::vector<double> losses, norms;
};

// The number after "key": in one JSON line (NaN if absent).
double JsonNumber(const std::string& line, const std::string& key) {
  const size_t at = line.find("\"" + key + "\":");
  if (at == std::string::npos) return std::nan("");
  return std::strtod(line.c_str() + at + key.size() + 3, nullptr);
}

// Runs the spec in `world` processes (`local` ranks per node).
Processes RunProcesses(const TrainSpec& spec, int world, int local,
                       const std::string& name, bool torchrun = false) {
  auto worker = WorkspaceBinary("worker/train/zeroshard-worker");
  EXPECT_TRUE(worker.ok()) << worker.status();
  auto server = WorkspaceBinary("server/zeroshard-server");
  EXPECT_TRUE(server.ok()) << server.status();
  if (!worker.ok() || !server.ok()) return {};
  Processes run;
  const std::string dir = TempDir() + "/" + name;
  mkdir(dir.c_str(), 0755);
  FleetOptions fo;
  fo.server_binary = *server;
  fo.num_shards = 2;
  fo.work_dir = dir;
  fo.extra_args = {"--threads=1", "--grpc_threads=8"};
  auto fleet = LocalFleet::Start(fo);
  EXPECT_TRUE(fleet.ok()) << fleet.status();
  if (!fleet.ok()) return {};
  const std::string port_file = dir + "/port", out = dir + "/final.bin";
  // A file left by an earlier run in the same directory (outside Bazel)
  // would send the ranks to a port nobody listens on.
  std::remove(port_file.c_str());
  std::remove(out.c_str());
  std::vector<std::string> flags =
      engine::TrainWorkerFlags(spec, dir + "/ds_config.json");
  flags.push_back("--stats");
  flags.push_back("--metrics_file=" + dir + "/metrics-%r.jsonl");
  std::vector<Subprocess> procs;
  auto spawn = [&](int r, const std::string& coord) {
    SpawnOptions o;
    o.argv = {*worker,
              "--servers=" + absl::StrJoin((*fleet)->addresses(), ",")};
    for (const std::string& f : flags) o.argv.push_back(f);
    if (r == 0) {
      o.argv.push_back("--port_file=" + port_file);
      o.argv.push_back("--save=" + out);
    }
    o.env = RankEnv(torchrun, r, world, local, coord);
    o.log_path = absl::StrCat(dir, "/rank", r, ".log");
    auto p = Subprocess::Spawn(o);
    EXPECT_TRUE(p.ok()) << p.status();
    if (p.ok()) procs.push_back(std::move(*p));
  };
  spawn(0, "127.0.0.1:0");
  std::string port;
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (port.empty() && absl::Now() < give_up) {
    std::ifstream(port_file) >> port;
    if (port.empty()) absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_FALSE(port.empty()) << "rank 0 wrote no port";
  for (int r = 1; r < world; ++r) spawn(r, "127.0.0.1:" + port);
  // Until every rank has ended; the first to fail stops the rest (which
  // would otherwise wait out their bootstrap or collective timeouts: a
  // minute each on a GPU machine's short lease).
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  bool failed = false;
  for (size_t left = procs.size(); left > 0 && !failed;) {
    left = 0;
    for (size_t r = 0; r < procs.size(); ++r) {
      if (!procs[r].running()) continue;
      const std::optional<int> status = procs[r].Poll();
      if (!status.has_value()) {
        ++left;
        continue;
      }
      if (*status != 0) {
        ADD_FAILURE() << "rank " << r << ": " << DescribeWaitStatus(*status)
                      << " (log " << dir << "/rank" << r << ".log)";
        failed = true;
      }
    }
    if (left > 0 && absl::Now() > deadline) {
      ADD_FAILURE() << left << " rank(s) still running after 120 s (logs "
                    << dir << ")";
      failed = true;
    }
    if (left > 0 && !failed) absl::SleepFor(absl::Milliseconds(5));
  }
  for (Subprocess& p : procs) {
    if (p.running()) p.Stop(std::chrono::seconds(2));
  }
  auto model = io::ReadModelFile(out);
  EXPECT_TRUE(model.ok()) << model.status();
  if (model.ok()) run.params = std::move(model->params);
  std::ifstream in(dir + "/metrics-0.jsonl");
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"event\":\"step\"") == std::string::npos) continue;
    run.losses.push_back(JsonNumber(line, "loss"));
    run.norms.push_back(JsonNumber(line, "grad_norm"));
  }
  return run;
}

struct Case {
  const char* name;
  int world, local;
  bool offload;
  int stage = 3;
  bool aggregate = false;
  engine::Precision precision = engine::Precision::kFp32;
  bool torchrun = false;  // torchrun's variables instead of ZEROSHARD_*
};

class MultiprocessTest : public ::testing::TestWithParam<Case> {};

TEST_P(MultiprocessTest, ProcessesMatchTheInProcessRun) {
  const Case& c = GetParam();
  TrainSpec spec = Spec(c.stage, c.offload, c.aggregate);
  if (c.precision == engine::Precision::kFp16) {
    // A dynamic scale that overflows, halves and grows within 4 steps.
    spec.zero.precision = c.precision;
    spec.zero.loss_scaler.dynamic = true;
    spec.zero.loss_scaler.initial_scale = 1 << 18;
    spec.zero.loss_scaler.scale_window = 1;
    spec.zero.loss_scaler.hysteresis = 1;
  }
  auto want = engine::RunInProcess(spec, c.world, 2);
  ASSERT_TRUE(want.ok()) << want.status();
  if (c.precision == engine::Precision::kFp16) {
    int skipped = 0;
    for (const engine::StepStats& st : (*want)[0].stats) skipped += st.skipped;
    EXPECT_GT(skipped, 0) << "no fp16 overflow to skip";
  }
  const std::vector<float> got =
      RunProcesses(spec, c.world, c.local, c.name, c.torchrun).params;
  ASSERT_EQ(got.size(), (*want)[0].params.size());
  EXPECT_EQ(engine::FirstDifference(got, (*want)[0].params), -1);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, MultiprocessTest,
    ::testing::Values(Case{"w2_flat", 2, 1, false},
                      Case{"w2_offload", 2, 1, true},
                      Case{"w4_two_nodes", 4, 2, false},
                      Case{"w4_aggregated", 4, 2, false, 2, true},
                      Case{"w4_fp16", 4, 2, false, 3, false,
                           engine::Precision::kFp16},
                      Case{"w4_torchrun_env", 4, 2, false, 3, false,
                           engine::Precision::kFp32, true}),
    [](const auto& info) { return std::string(info.param.name); });

// The device path in real processes: two nodes of one rank each, joined by
// UCX (or one node of two ranks), K = 2 real servers.
struct DeviceCase {
  const char* name;
  const char* device;  // "host-emulated" or "cuda"
  int stage;
  bool bf16 = false;
  int local = 1;      // ranks per node (of 2)
  bool pool = false;  // 5 blocks, stage3_max_live_parameters 0
};

class DeviceProcessesTest : public ::testing::TestWithParam<DeviceCase> {};

TEST_P(DeviceProcessesTest, MatchTheCpuEngine) {
  const DeviceCase& c = GetParam();
  const bool cuda = std::string(c.device) == "cuda";
  if (std::string why; cuda && !cuda::CudaAvailable(&why)) {
    GTEST_SKIP() << "no CUDA device: " << why;
  }
  TrainSpec spec = Spec(c.stage, false, false);
  if (c.bf16) spec.zero.precision = engine::Precision::kBf16;
  if (c.pool) {
    spec.config.num_layers = 5;
    spec.zero.stage3_max_live_parameters = 0;
  }
  auto want = engine::RunInProcess(spec, 2, 2);  // on the CPU
  ASSERT_TRUE(want.ok()) << want.status();
  spec.device = c.device;
  // The workers inherit it: each copy on the host-emulated device lags.
  if (c.pool && !cuda) setenv("ZEROSHARD_HOST_COPY_LAG_US", "1000", 1);
  const Processes got = RunProcesses(spec, 2, c.local, c.name);
  unsetenv("ZEROSHARD_HOST_COPY_LAG_US");
  const TrainResult& cpu = (*want)[0];
  ASSERT_EQ(got.losses.size(), cpu.stats.size());
  if (!cuda) {  // the host-emulated device: the CPU engine's bits
    ASSERT_EQ(got.params.size(), cpu.params.size());
    EXPECT_EQ(engine::FirstDifference(got.params, cpu.params), -1);
    return;
  }
  // On the GPU, cuda_engine_test's bounds; the metrics file's 7 and 6
  // significant digits are well inside them.
  const double loss_tol = c.bf16 ? 2e-2 : 1e-4, norm_tol = c.bf16 ? 5e-2 : 1e-4;
  double worst_loss = 0, worst_norm = 0;
  for (size_t s = 0; s < cpu.stats.size(); ++s) {
    const double dl = std::fabs(got.losses[s] - cpu.stats[s].global_loss) /
                      std::fabs(cpu.stats[s].global_loss);
    const double dn = std::fabs(got.norms[s] - cpu.stats[s].grad_norm) /
                      cpu.stats[s].grad_norm;
    EXPECT_LE(dl, loss_tol) << "step " << s;
    EXPECT_LE(dn, norm_tol) << "step " << s;
    worst_loss = std::max(worst_loss, dl);
    worst_norm = std::max(worst_norm, dn);
  }
  std::printf(
      "processes stage=%d ranks=2 nodes=%d precision=%s%s steps=%zu "
      "loss_err_rel=%.3e grad_norm_err_rel=%.3e (cuda workers over UCX "
      "against the cpu engine)\n",
      c.stage, 2 / c.local, c.bf16 ? "bf16" : "fp32",
      c.pool ? " pool=2of5" : "", cpu.stats.size(), worst_loss, worst_norm);
}

INSTANTIATE_TEST_SUITE_P(
    Devices, DeviceProcessesTest,
    ::testing::Values(
        DeviceCase{"emulated_stage0", "host-emulated", 0},
        DeviceCase{"emulated_stage1", "host-emulated", 1},
        DeviceCase{"emulated_stage2", "host-emulated", 2},
        DeviceCase{"emulated_stage3", "host-emulated", 3},
        DeviceCase{"emulated_stage2_bf16", "host-emulated", 2, true},
        DeviceCase{"emulated_stage3_one_node", "host-emulated", 3, false, 2},
        DeviceCase{"emulated_stage3_pool", "host-emulated", 3, false, 1, true},
        DeviceCase{"cuda_stage0", "cuda", 0},
        DeviceCase{"cuda_stage1", "cuda", 1},
        DeviceCase{"cuda_stage2", "cuda", 2},
        DeviceCase{"cuda_stage3", "cuda", 3},
        DeviceCase{"cuda_stage2_bf16", "cuda", 2, true},
        DeviceCase{"cuda_stage3_one_node", "cuda", 3, false, 2},
        DeviceCase{"cuda_stage3_pool", "cuda", 3, false, 1, true}),
    [](const auto& info) { return std::string(info.param.name); });

// Without ZEROSHARD_* or torchrun's variables (and without --elastic) a
// worker exits 1 naming both sets and --elastic; with both disagreeing it
// names the pair.
TEST(WorkerEnvTest, MissingOrDisagreeingRankIsAnError) {
  auto worker = WorkspaceBinary("worker/train/zeroshard-worker");
  ASSERT_TRUE(worker.ok()) << worker.status();
  const std::string dir = TempDir() + "/env_errors";
  mkdir(dir.c_str(), 0755);
  const TrainSpec spec = Spec(3, false, false);
  struct Try {
    std::vector<std::string> env, words;
  };
  const std::vector<Try> tries = {
      {{}, {"ZEROSHARD_RANK", "MASTER_ADDR", "MASTER_PORT", "--elastic"}},
      {{"RANK=1", "ZEROSHARD_RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1",
        "MASTER_PORT=1"},
       {"ZEROSHARD_RANK=0 and RANK=1 disagree"}}};
  for (size_t i = 0; i < tries.size(); ++i) {
    SpawnOptions o;
    o.argv = {*worker, "--servers=127.0.0.1:1"};
    for (const std::string& f :
         engine::TrainWorkerFlags(spec, dir + "/ds_config.json")) {
      o.argv.push_back(f);
    }
    o.env = tries[i].env;
    o.log_path = absl::StrCat(dir, "/try", i, ".log");
    auto p = Subprocess::Spawn(o);
    ASSERT_TRUE(p.ok()) << p.status();
    auto status = p->Wait(std::chrono::seconds(60));
    ASSERT_TRUE(status.ok()) << "worker hangs";
    // 3: a permanent error (elastic::WorkerExitCode), not restarted.
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 3)
        << DescribeWaitStatus(*status);
    std::ifstream in(o.log_path);
    const std::string log((std::istreambuf_iterator<char>(in)),
                          std::istreambuf_iterator<char>());
    for (const std::string& w : tries[i].words) {
      EXPECT_NE(log.find(w), std::string::npos) << w << " not in: " << log;
    }
  }
}

}  // namespace
}  // namespace zeroshard::train
