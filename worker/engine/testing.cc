#include "worker/engine/testing.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/shard_client.h"
#include "common/crc32c.h"
#include "common/status_macros.h"
#include "fleet/local_fleet.h"
#include "gtest/gtest.h"
#include "worker/collective/host_communicator.h"
#include "worker/collective/inprocess_transport.h"
#include "worker/engine/zero_plan.h"
#include "worker/gpt2/engine_model.h"
#include "worker/gpt2/reference_io.h"
#include "worker/io/token_file.h"
#include "worker/train/train_flags.h"

namespace zeroshard::engine {

gpt2::Config TinyConfig() {
  gpt2::Config c;
  c.max_seq_len = 16;
  c.vocab_size = 64;
  c.padded_vocab_size = 64;
  c.num_layers = 2;
  c.num_heads = 2;
  c.channels = 32;
  return c;
}

train::TrainSpec TinySpec(int stage, bool offload, const std::string& job) {
  train::TrainSpec s;
  s.config = TinyConfig();
  s.zero.stage = stage;
  s.zero.offload_param_server = offload;
  s.zero.micro_batch = 2;
  s.zero.seq_len = 16;
  s.zero.gradient_accumulation_steps = 2;
  s.zero.gradient_clipping = 0.5;
  s.zero.lr_schedule.lr = 1e-2;
  s.zero.weight_decay = 0.1;
  s.zero.reduce_bucket_size = 3000;
  s.zero.job_id = job;
  s.steps = 8;
  s.seed = 7;
  s.init_std = 0.1;
  return s;
}

absl::StatusOr<std::unique_ptr<LocalFleet>> StartTestFleet(
    uint32_t servers, const std::vector<std::string>& extra_args) {
  auto binary = WorkspaceBinary("server/zeroshard-server");
  if (!binary.ok()) return binary.status();
  FleetOptions fo;
  fo.server_binary = *binary;
  fo.num_shards = servers;
  const char* tmp = std::getenv("TEST_TMPDIR");
  fo.work_dir = tmp != nullptr ? tmp : "/tmp";
  fo.extra_args = {"--threads=1", "--grpc_threads=8"};
  for (const std::string& a : extra_args) fo.extra_args.push_back(a);
  return LocalFleet::Start(fo);
}

absl::StatusOr<std::vector<train::TrainResult>> RunInProcess(
    const train::TrainSpec& spec, int world, uint32_t servers) {
  std::unique_ptr<LocalFleet> fleet;
  if (spec.zero.stage > 0) {
    auto started = StartTestFleet(servers, {});
    if (!started.ok()) return started.status();
    fleet = std::move(*started);
  }
  return RunInProcessOn(spec, world, fleet.get());
}

absl::StatusOr<std::vector<train::TrainResult>> RunInProcessOn(
    const train::TrainSpec& spec, int world, LocalFleet* fleet) {
  return RunInProcessWith(spec, world, fleet, InProcessHooks());
}

absl::Status RunOnRanks(int world, LocalFleet* fleet,
                        const InProcessHooks& hooks, const RankFn& fn) {
  auto hub = std::make_shared<collective::InProcessHub>(world);
  if (hooks.link_bytes_per_second > 0) {
    hub->SetLink(hooks.link_bytes_per_second, hooks.link_latency);
  }
  std::vector<std::unique_ptr<collective::HostCommunicator>> comms(world);
  std::vector<std::unique_ptr<ShardClient>> clients(world);
  for (int r = 0; r < world; ++r) {
    collective::HostCommunicatorOptions co;
    co.part_alignment = kTestAlignment;
    auto comm = collective::HostCommunicator::Create(hub->MakeTransport(r), co);
    if (!comm.ok()) return comm.status();
    comms[r] = std::move(*comm);
    if (fleet != nullptr) {
      ClientOptions o;
      o.addresses = fleet->addresses();
      if (hooks.client_options) hooks.client_options(r, &o);
      auto client = ShardClient::Connect(o);
      if (!client.ok()) return client.status();
      clients[r] = std::move(*client);
    }
  }
  std::vector<absl::Status> results(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      results[r] = fn(r, comms[r].get(), clients[r].get(), hub.get());
      if (!results[r].ok()) {
        std::fprintf(stderr, "rank %d failed: %s\n", r,
                     std::string(results[r].message()).c_str());
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) {
    if (!results[r].ok()) {
      return absl::Status(results[r].code(),
                          absl::StrCat("rank ", r, ": ", results[r].message()));
    }
  }
  return absl::OkStatus();
}

uint32_t DigestOf(const std::vector<float>& params) {
  return Crc32c(params.data(), params.size() * 4);
}

absl::StatusOr<std::vector<train::TrainResult>> RunInProcessWith(
    const train::TrainSpec& spec, int world, LocalFleet* fleet,
    const InProcessHooks& hooks) {
  std::vector<train::TrainResult> out(world);
  std::vector<train::TrainProgress> scratch;
  std::vector<train::TrainProgress>* progress =
      hooks.progress != nullptr ? hooks.progress : &scratch;
  progress->assign(world, train::TrainProgress());
  ZS_RETURN_IF_ERROR(RunOnRanks(
      world, fleet, hooks,
      [&](int r, collective::Communicator* comm, ShardClient* client,
          collective::InProcessHub* hub) -> absl::Status {
        train::StepCallback on_step;
        if (hooks.on_step) {
          on_step = [&, r, hub](const StepStats& s) {
            hooks.on_step(r, s, hub);
          };
        }
        ZS_ASSIGN_OR_RETURN(
            out[r],
            train::RunTraining(spec, comm, client, on_step, &(*progress)[r]));
        return absl::OkStatus();
      }));
  // A digest of rank 0's final parameters, so that two commits' runs can be
  // compared bit for bit from their logs.
  std::printf(
      "digest: stage %d%s W=%d K=%u steps=%d params crc32c %08x\n",
      spec.zero.stage, spec.zero.offload_param_server ? "+offload" : "", world,
      fleet != nullptr ? static_cast<unsigned>(fleet->addresses().size()) : 0u,
      spec.steps, DigestOf(out[0].params));
  std::fflush(stdout);
  return out;
}

std::string FreshTestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp ? tmp : "/tmp", "/", name);
  const int rc = std::system(absl::StrCat("rm -rf '", dir, "'").c_str());
  EXPECT_EQ(rc, 0) << dir;
  return dir;
}

train::TrainSpec CheckpointedSpec(int steps) {
  train::TrainSpec spec = TinySpec(3, false, "ckpt-job");
  spec.steps = steps;
  spec.zero.checkpoint_interval = 4;
  spec.zero.recovery_timeout_seconds = 60;
  return spec;
}

absl::StatusOr<train::TrainResult> RunCheckpointed(const train::TrainSpec& spec,
                                                   uint32_t servers,
                                                   const std::string& dir) {
  auto fleet =
      StartTestFleet(servers, {absl::StrCat("--checkpoint_dir=", dir)});
  if (!fleet.ok()) return fleet.status();
  auto results = RunInProcessOn(spec, 2, fleet->get());
  if (!results.ok()) return results.status();
  return (*results)[0];
}

absl::StatusOr<std::string> WriteTestTokens(const std::string& name,
                                            int64_t count, int vocab,
                                            uint64_t seed) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name, ".bin");
  std::vector<uint16_t> tokens(static_cast<size_t>(count));
  uint64_t x = seed;
  for (uint16_t& t : tokens) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    t = static_cast<uint16_t>((x >> 33) % static_cast<uint64_t>(vocab));
  }
  absl::Status s = io::WriteTokenFile(path, tokens);
  if (!s.ok()) return s;
  return path;
}

std::string DeepSpeedJson(const train::TrainSpec& spec, uint32_t alignment) {
  const ZeroOptions& z = spec.zero;
  const bool offload = z.offload_param_server;
  auto ref = gpt2::EngineLayout(spec.config);
  uint64_t largest = 1;
  if (ref.ok()) {
    for (const Range& u : ref->units) largest = std::max(largest, u.size());
  }
  // fp16's scaler as DeepSpeed writes it (initial_scale a power of two).
  const engine::LossScalerOptions& l = z.loss_scaler;
  std::string precision;
  if (z.precision == engine::Precision::kFp16) {
    precision = absl::StrFormat(
        R"("fp16": {"enabled": true, "loss_scale": %.17g,
      "initial_scale_power": %d, "loss_scale_window": %d, "hysteresis": %d,
      "consecutive_hysteresis": %s, "min_loss_scale": %.17g},
  )",
        l.dynamic ? 0.0 : l.static_scale, std::ilogb(l.initial_scale),
        l.scale_window, l.hysteresis,
        l.consecutive_hysteresis ? "true" : "false", l.min_scale);
  } else if (z.precision == engine::Precision::kBf16) {
    precision = R"("bf16": {"enabled": true},
  )";
  }
  return absl::StrFormat(
      R"({%s"train_micro_batch_size_per_gpu": %d,
  "gradient_accumulation_steps": %d,
  "gradient_clipping": %.17g,
  "optimizer": {"type": "AdamW", "params": {"lr": %.17g,
      "betas": [%.17g, %.17g], "eps": %.17g, "weight_decay": %.17g}},
  "zero_optimization": {"stage": %d, "overlap_comm": %s,
      "reduce_bucket_size": %d, "allgather_bucket_size": %d,
      "stage3_prefetch_bucket_size": %d,
      "stage3_param_persistence_threshold": %d,
      "stage3_max_reuse_distance": %d,
      "stage3_max_live_parameters": %d,
      "offload_param": {"device": "%s"}},
  "zeroshard": {"alignment": %d, "server_aggregation": %s%s}})",
      precision, z.micro_batch, z.gradient_accumulation_steps,
      z.gradient_clipping, z.lr_schedule.lr, z.beta1, z.beta2, z.eps,
      z.weight_decay, z.stage, z.overlap_comm ? "true" : "false",
      z.reduce_bucket_size, z.allgather_bucket_size,
      largest * static_cast<uint64_t>(z.stage3_prefetch_units),
      z.stage3_param_persistence_threshold, z.stage3_max_reuse_distance,
      z.stage3_max_live_parameters, offload ? "server" : "none", alignment,
      z.server_aggregation ? "true" : "false",
      z.delayed_update_from > 0 ? absl::StrFormat(
                                      R"(, "delayed_parameter_update": true,
      "delayed_update_warmup_steps": %d)",
                                      z.delayed_update_from)
                                : std::string());
}

std::vector<std::string> TrainWorkerFlags(const train::TrainSpec& s,
                                          const std::string& config_path) {
  std::ofstream(config_path) << DeepSpeedJson(s, kTestAlignment);
  const gpt2::Config& c = s.config;
  train::TrainFlags f;
  f.config = config_path;
  f.data = absl::StrJoin(s.data, ",");
  f.steps = s.steps;
  f.max_seq_len = c.max_seq_len;
  f.vocab = c.vocab_size;
  f.layers = c.num_layers;
  f.heads = c.num_heads;
  f.channels = c.channels;
  f.seq_len = s.zero.seq_len;
  f.seed = static_cast<int64_t>(s.seed);
  f.init_std = s.init_std;
  f.job_id = s.zero.job_id;
  if (s.device != "cpu") f.device = s.device;
  f.activation_checkpointing = s.activation_checkpointing;
  return train::TrainFlagsArgv(f);
}

bool FlipByteNearEnd(const std::string& path) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  if (!f.good()) return false;
  f.seekg(-100, std::ios::end);
  char byte = 0;
  f.read(&byte, 1);
  byte ^= 0x04;
  f.seekp(-100, std::ios::end);
  f.write(&byte, 1);
  return f.good();
}

double WorstUpdateRel(const train::TrainSpec& spec, const std::vector<float>& a,
                      const std::vector<float>& b) {
  auto layout = gpt2::ParamLayout::Create(spec.config);
  auto init = train::InitialParams(spec);
  if (!layout.ok() || !init.ok()) return INFINITY;
  const uint64_t C = static_cast<uint64_t>(spec.config.channels);
  double worst = 0;
  for (const gpt2::ParamTensor& t : layout->tensors()) {
    std::vector<Range> parts = {{t.offset, t.offset + t.numel}};
    if (t.kind == gpt2::ParamKind::kQkvb) {
      parts = {{t.offset, t.offset + C}, {t.offset + 2 * C, t.offset + 3 * C}};
    }
    for (const Range& r : parts) {
      worst = std::max(worst,
                       gpt2::UpdateRel(a.data() + r.begin, b.data() + r.begin,
                                       init->data() + r.begin, r.size()));
    }
  }
  return worst;
}

int64_t FirstDifference(const std::vector<float>& a,
                        const std::vector<float>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      return static_cast<int64_t>(i);
    }
  }
  return -1;
}

}  // namespace zeroshard::engine
