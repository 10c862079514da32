#include "launcher/smoke.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/local_fleet.h"
#include "client/shard_client.h"
#include "common/flags.h"
#include "common/subprocess.h"
#include "launcher/log_tail.h"
#include "worker/quadratic.h"

namespace zeroshard {
namespace {

std::atomic<int> g_signal{0};
void OnSignal(int signo) { g_signal = signo; }

double JobLoss(ShardClient& client) {
  const uint64_t total = client.plan().total();
  std::vector<float> p(total);
  if (!client.Gather(Range{0, total}, v1::DTYPE_FP32, p.data()).ok()) {
    return -1;
  }
  return QuadraticLoss(p.data(), 0, total, total);
}

}  // namespace

int RunSmoke(int argc, char** argv) {
  uint32_t servers = 2, workers = 2;
  int64_t steps = 30, elements = 1 << 20;
  std::string work_dir = "/tmp/zeroshard-smoke";
  FlagSet flags("zeroshard smoke",
                "zeroshard smoke [flags]\n\n"
                "Starts shard servers and workers on loopback and trains the "
                "smoke task through them.");
  flags.Uint32("servers", &servers, "Shard servers to start.");
  flags.Uint32("workers", &workers, "Worker processes to start.");
  flags.Int64("steps", &steps, "Training steps.");
  flags.Int64("elements", &elements, "Parameters of the smoke model.");
  flags.String("work_dir", &work_dir, "Where logs and port files go.");
  std::vector<std::string> rest = flags.ParseOrExit(argc, argv, 2);
  const std::string prog = "zeroshard";
  if (!rest.empty()) {
    ExitWithError(prog, absl::StrCat("unexpected argument '", rest[0], "'"));
  }
  if (servers < 1 || servers > 64 || workers < 1 || workers > 256) {
    ExitWithError(prog, "--servers must be in [1, 64], --workers in [1, 256]");
  }
  if (steps < 1 || elements < 64) {
    ExitWithError(prog, "--steps must be >= 1 and --elements >= 64");
  }
  auto server_bin = FindBinary("zeroshard-server", {".", "../server"});
  auto worker_bin = FindBinary("zeroshard-worker", {".", "../worker"});
  if (!server_bin.ok())
    ExitWithError(prog, std::string(server_bin.status().message()));
  if (!worker_bin.ok())
    ExitWithError(prog, std::string(worker_bin.status().message()));
  mkdir(work_dir.c_str(), 0755);
  if (access(work_dir.c_str(), W_OK) != 0) {
    ExitWithError(prog, absl::StrCat("--work_dir ", work_dir,
                                     " is not a writable directory"));
  }
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);

  std::printf(
      "zeroshard smoke: %u shard servers, %u workers, %lld steps, "
      "%lld parameters (logs in %s)\n",
      servers, workers, static_cast<long long>(steps),
      static_cast<long long>(elements), work_dir.c_str());
  FleetOptions fo;
  fo.server_binary = *server_bin;
  fo.num_shards = servers;
  fo.work_dir = work_dir;
  auto fleet = LocalFleet::Start(fo);
  if (!fleet.ok()) {
    std::fprintf(stderr, "zeroshard: %s\n",
                 std::string(fleet.status().message()).c_str());
    return 1;
  }
  std::string addresses;
  for (const std::string& a : (*fleet)->addresses()) {
    absl::StrAppend(&addresses, addresses.empty() ? "" : ",", a);
  }
  std::printf("servers ready: %s\n", addresses.c_str());
  ClientOptions co;
  co.addresses = (*fleet)->addresses();
  auto client = ShardClient::Connect(co);
  if (!client.ok()) return 1;
  absl::Status s = (*client)->RegisterModel(
      QuadraticSpec("smoke", servers, static_cast<uint64_t>(elements)));
  if (!s.ok()) {
    std::fprintf(stderr, "zeroshard: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  const double initial = JobLoss(**client);
  std::printf("initial loss %.6f\n", initial);

  std::vector<Subprocess> procs;
  for (uint32_t r = 0; r < workers; ++r) {
    SpawnOptions so;
    so.argv = {*worker_bin, absl::StrCat("--servers=", addresses),
               "--job=smoke", absl::StrCat("--steps=", steps),
               absl::StrCat("--elements=", elements)};
    so.env = {absl::StrCat("ZEROSHARD_RANK=", r),
              absl::StrCat("ZEROSHARD_WORLD_SIZE=", workers)};
    so.log_path = absl::StrCat(work_dir, "/worker-", r, ".log");
    unlink(so.log_path.c_str());
    auto p = Subprocess::Spawn(so);
    if (!p.ok()) {
      std::fprintf(stderr, "zeroshard: %s\n",
                   std::string(p.status().message()).c_str());
      return 1;
    }
    procs.push_back(std::move(*p));
  }
  uint64_t last_step = 0, printed = 0;
  const auto start = std::chrono::steady_clock::now();
  size_t done = 0;
  while (done < procs.size()) {
    if (g_signal != 0) {
      std::printf("zeroshard: signal %d, stopping the job\n", g_signal.load());
      for (auto& p : procs) p.Stop(std::chrono::milliseconds(2000));
      return 1;
    }
    done = 0;
    for (uint32_t r = 0; r < procs.size(); ++r) {
      auto st = procs[r].Poll();
      if (!st) continue;
      if (!(WIFEXITED(*st) && WEXITSTATUS(*st) == 0)) {
        std::fprintf(stderr,
                     "zeroshard: worker rank %u failed with %s; stopping the "
                     "job. Its log (%s/worker-%u.log) ends:\n%s",
                     r, DescribeWaitStatus(*st).c_str(), work_dir.c_str(), r,
                     TailLines(absl::StrCat(work_dir, "/worker-", r, ".log"), 5)
                         .c_str());
        for (auto& p : procs) p.Stop(std::chrono::milliseconds(2000));
        return 1;
      }
      ++done;
    }
    auto stats = (*client)->Stats();
    if (stats.ok() && (*stats)[0].step() != last_step) {
      last_step = (*stats)[0].step();
      const double secs = std::chrono::duration<double>(
                              std::chrono::steady_clock::now() - start)
                              .count();
      if (last_step / 5 > printed / 5 ||
          last_step == static_cast<uint64_t>(steps)) {
        printed = last_step;
        std::printf("step %llu/%lld  %.1f steps/s\n",
                    static_cast<unsigned long long>(last_step),
                    static_cast<long long>(steps), last_step / secs);
        std::fflush(stdout);
      }
    }
    if (done < procs.size()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  const double final_loss = JobLoss(**client);
  auto stats = (*client)->Stats();
  uint64_t contributions = 0, rejected = 0;
  if (stats.ok()) {
    for (const auto& st : *stats) {
      contributions += st.contributions_applied();
      rejected += st.requests_rejected();
    }
  }
  std::printf(
      "final loss %.6f (from %.6f) after %llu steps; %llu "
      "contributions applied, %llu rejected\n",
      final_loss, initial, static_cast<unsigned long long>(last_step),
      static_cast<unsigned long long>(contributions),
      static_cast<unsigned long long>(rejected));
  s = (*fleet)->Stop(std::chrono::milliseconds(5000));
  if (!s.ok()) {
    std::fprintf(stderr, "zeroshard: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  if (!(final_loss >= 0 && final_loss < 0.5 * initial)) {
    std::fprintf(stderr, "zeroshard: smoke FAILED: the loss did not halve\n");
    return 1;
  }
  std::printf("smoke OK\n");
  return 0;
}

}  // namespace zeroshard
