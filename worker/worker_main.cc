// zeroshard-worker: one training process of a job.
//
// Rank and world size come from flags or from the environment the launcher
// sets (ZEROSHARD_RANK, ZEROSHARD_WORLD_SIZE). Today's task is the smoke
// task (worker/quadratic.h); the GPT-2 model and the ZeRO engine plug in
// here next.
//
//   zeroshard-worker --servers=127.0.0.1:7000,127.0.0.1:7001 --steps=30
//
// Rank 0 leads: it registers the model, prepares and commits each step.
// Every rank pushes the gradient of its slice, then waits for the commit.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/shard_client.h"
#include "common/flags.h"
#include "worker/quadratic.h"

namespace zeroshard {
namespace {

int64_t EnvInt(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::atoll(v) : fallback;
}

int Main(int argc, char** argv) {
  std::string servers_flag, job = "smoke", task = "quadratic";
  int64_t rank = EnvInt("ZEROSHARD_RANK", 0);
  int64_t world = EnvInt("ZEROSHARD_WORLD_SIZE", 1);
  int64_t steps = 30, elements = 1 << 20, log_every = 5;
  double lr = 0.02;
  FlagSet flags("zeroshard-worker",
                "zeroshard-worker --servers=HOST:PORT,... [flags]\n\n"
                "One worker process of a zeroshard job.");
  flags.String("servers", &servers_flag,
               "Comma-separated shard server addresses, shard 0 first.");
  flags.String("job", &job, "Job id.");
  flags.String("task", &task, "What to train: quadratic (the smoke task).");
  flags.Int64("rank", &rank, "This worker's rank (env ZEROSHARD_RANK).");
  flags.Int64("world_size", &world,
              "Number of workers (env ZEROSHARD_WORLD_SIZE).");
  flags.Int64("steps", &steps, "Training steps.");
  flags.Int64("elements", &elements, "Parameters of the quadratic task.");
  flags.Double("lr", &lr, "AdamW learning rate.");
  flags.Int64("log_every", &log_every, "Print a line every N steps.");
  std::vector<std::string> rest = flags.ParseOrExit(argc, argv);
  const std::string prog = flags.program();
  if (!rest.empty()) {
    ExitWithError(prog, absl::StrCat("unexpected argument '", rest[0], "'"));
  }
  if (task != "quadratic") {
    ExitWithError(prog, absl::StrCat("--task '", task,
                                     "' is not known (tasks: quadratic)"));
  }
  if (world < 1 || rank < 0 || rank >= world) {
    ExitWithError(prog, absl::StrCat("rank ", rank, " / world size ", world,
                                     " is not valid"));
  }
  if (steps < 0 || elements < 1 || !(lr > 0) || log_every < 1) {
    ExitWithError(prog,
                  "--steps >= 0, --elements >= 1, --lr > 0 and "
                  "--log_every >= 1 are required");
  }
  ClientOptions options;
  options.addresses = absl::StrSplit(servers_flag, ',', absl::SkipEmpty());
  if (options.addresses.empty()) ExitWithError(prog, "--servers is required");
  auto client_or = ShardClient::Connect(options);
  if (!client_or.ok()) {
    ExitWithError(prog, std::string(client_or.status().message()));
  }
  ShardClient& client = **client_or;
  const v1::ModelSpec spec =
      QuadraticSpec(job, static_cast<uint32_t>(options.addresses.size()),
                    static_cast<uint64_t>(elements));
  absl::Status s = client.RegisterModel(spec);  // idempotent on every rank
  if (!s.ok()) ExitWithError(prog, std::string(s.message()), 1);
  const PartitionPlan& plan = client.plan();
  const Range slice = plan.WorkerSlice(static_cast<uint32_t>(world),
                                       static_cast<uint32_t>(rank));
  std::vector<float> p(slice.size()), g(slice.size());
  const bool leader = rank == 0;

  uint64_t step = 0;
  if (!slice.empty()) {
    s = client.Gather(slice, v1::DTYPE_FP32, p.data(), &step);
    if (!s.ok()) ExitWithError(prog, std::string(s.message()), 1);
  }
  for (int64_t i = 0; i < steps; ++i) {
    // Local loss and gradient of this slice.
    const double loss =
        QuadraticLoss(p.data(), slice.begin, slice.size(), plan.total());
    for (uint64_t e = 0; e < slice.size(); ++e) {
      g[e] = (p[e] - QuadraticTarget(slice.begin + e)) /
             static_cast<float>(plan.total());
    }
    if (!slice.empty()) {
      PushId id{0, step, 0, absl::StrCat("rank", rank, "/step", step)};
      s = client.Push(slice, v1::DTYPE_FP32, g.data(), id);
      if (!s.ok()) ExitWithError(prog, std::string(s.message()), 1);
    }
    if (leader) {
      auto norm = client.Prepare(0, step);
      if (!norm.ok())
        ExitWithError(prog, std::string(norm.status().message()), 1);
      s = client.Commit(0, step, 1.0f, lr, norm->overflow);
      if (!s.ok()) ExitWithError(prog, std::string(s.message()), 1);
    }
    // Wait for the commit, then refresh this slice.
    uint64_t now = step;
    auto wait = std::chrono::microseconds(200);
    while (now == step) {
      if (!slice.empty()) {
        s = client.Gather(slice, v1::DTYPE_FP32, p.data(), &now);
      } else {
        float one;
        s = client.Gather(Range{0, 1}, v1::DTYPE_FP32, &one, &now);
      }
      if (!s.ok()) ExitWithError(prog, std::string(s.message()), 1);
      if (now == step) {
        std::this_thread::sleep_for(wait);
        wait = std::min<std::chrono::microseconds>(
            wait * 2, std::chrono::milliseconds(20));
      }
    }
    step = now;
    if ((i + 1) % log_every == 0 || i == 0 || i + 1 == steps) {
      std::printf("step %llu/%lld  slice loss %.6f\n",
                  static_cast<unsigned long long>(step),
                  static_cast<long long>(steps), loss);
      std::fflush(stdout);
    }
  }
  std::printf("final slice loss %.6f\n",
              QuadraticLoss(p.data(), slice.begin, slice.size(), plan.total()));
  return 0;
}

}  // namespace
}  // namespace zeroshard

int main(int argc, char** argv) { return zeroshard::Main(argc, argv); }
