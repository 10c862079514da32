// zeroshard-train-worker: one rank of a ZeRO training run of a small GPT-2
// on synthetic data (trainer.h), over UCX between real processes and real
// shard servers. Rank, world and node layout come from the launcher's
// environment (ucx_communicator.h: ZEROSHARD_RANK, ZEROSHARD_WORLD_SIZE,
// ZEROSHARD_LOCAL_RANK, ZEROSHARD_LOCAL_SIZE, ZEROSHARD_COORD); rank 0 may
// listen on port 0 and report the port through --port_file.
//
// Prints one stats line per step (step_stats.h); rank 0 writes the final
// parameters (fp32, memory order) to --out. Exits 0 on success, 1 with the
// error on failure, 2 on bad flags.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "client/malloc_tuning.h"
#include "client/shard_client.h"
#include "common/flags.h"
#include "common/status_macros.h"
#include "worker/collective/host_communicator.h"
#include "worker/collective/tcp_bootstrap.h"
#include "worker/collective/ucx_communicator.h"
#include "worker/collective/ucx_transport.h"
#include "worker/zero/trainer.h"

namespace zeroshard::zero {
namespace {

struct Args {
  TrainSpec spec;
  std::string servers, out, port_file;
  int64_t alignment = 64;
};

absl::StatusOr<std::unique_ptr<collective::HostCommunicator>> Connect(
    const Args& a) {
  ZS_ASSIGN_OR_RETURN(collective::UcxCommunicatorConfig c,
                      collective::UcxCommunicatorConfig::FromEnv());
  if (a.port_file.empty()) {
    c.part_alignment = static_cast<uint32_t>(a.alignment);
    return collective::CreateUcxCommunicator(c);
  }
  // As CreateUcxCommunicator, reporting rank 0's port.
  collective::TcpBootstrapOptions b;
  b.rank = c.rank;
  b.size = c.world_size;
  b.coordinator = c.coordinator;
  ZS_ASSIGN_OR_RETURN(auto bootstrap, collective::TcpBootstrap::Create(b));
  if (c.rank == 0) {
    std::ofstream(a.port_file + ".tmp") << bootstrap->port() << "\n";
    std::rename((a.port_file + ".tmp").c_str(), a.port_file.c_str());
  }
  ZS_ASSIGN_OR_RETURN(auto transport,
                      collective::CreateUcxTransport(*bootstrap));
  collective::HostCommunicatorOptions o;
  o.part_alignment = static_cast<uint32_t>(a.alignment);
  o.local_size = c.local_size;
  return collective::HostCommunicator::Create(std::move(transport), o);
}

absl::Status Run(const Args& a) {
  ZS_ASSIGN_OR_RETURN(auto comm, Connect(a));
  std::unique_ptr<ShardClient> client;
  if (a.spec.zero.stage > 0) {
    ClientOptions o;
    o.addresses = absl::StrSplit(a.servers, ',', absl::SkipEmpty());
    ZS_ASSIGN_OR_RETURN(client, ShardClient::Connect(o));
  }
  ZS_ASSIGN_OR_RETURN(TrainResult r,
                      RunTraining(a.spec, comm.get(), client.get()));
  for (const StepStats& s : r.stats) {
    std::printf("rank %d: %s\n", comm->rank(), DescribeStepStats(s).c_str());
  }
  if (comm->rank() == 0 && !a.out.empty()) {
    std::ofstream f(a.out, std::ios::binary);
    f.write(reinterpret_cast<const char*>(r.params.data()),
            static_cast<std::streamsize>(4 * r.params.size()));
    if (!f.good()) return absl::InternalError("cannot write " + a.out);
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace zeroshard::zero

int main(int argc, char** argv) {
  using zeroshard::zero::Args;
  zeroshard::TuneMallocForTransfers();
  Args a;
  zeroshard::zero::TrainSpec& s = a.spec;
  s.config = {16, 64, 64, 2, 2, 32};
  int64_t max_seq_len = 16, vocab = 64, layers = 2, heads = 2, channels = 32;
  int64_t stage = 0, batch = 2, seq_len = 16, gas = 1, steps = 1, seed = 1;
  int64_t bucket = 500'000'000, prefetch = 1;
  bool offload = false;
  zeroshard::FlagSet flags(
      "zeroshard-train-worker",
      "zeroshard-train-worker [flags]\n\nOne rank of a ZeRO run of a small "
      "GPT-2 on synthetic tokens (rank from ZEROSHARD_RANK etc.).");
  flags.Int64("stage", &stage, "ZeRO stage 0-3");
  flags.Bool("offload_param_server", &offload,
             "stage 3: parameters on servers");
  flags.String("servers", &a.servers, "shard servers, comma-separated");
  flags.Int64("steps", &steps, "optimizer steps");
  flags.Int64("max_seq_len", &max_seq_len, "model maxT");
  flags.Int64("vocab", &vocab, "vocabulary (= padded vocabulary)");
  flags.Int64("layers", &layers, "blocks");
  flags.Int64("heads", &heads, "attention heads");
  flags.Int64("channels", &channels, "channels");
  flags.Int64("batch", &batch, "micro-batch B");
  flags.Int64("seq_len", &seq_len, "sequence length T");
  flags.Int64("gas", &gas, "gradient accumulation steps");
  flags.Double("clip", &s.zero.gradient_clipping, "max gradient norm (0: off)");
  flags.Double("lr", &s.zero.lr, "learning rate");
  flags.Double("weight_decay", &s.zero.weight_decay, "on matrices");
  flags.Int64("bucket", &bucket, "reduce bucket size (elements)");
  flags.Int64("prefetch", &prefetch, "stage 3 prefetch units");
  flags.Int64("seed", &seed, "init and data seed");
  flags.Double("init_std", &s.init_std, "std of matrices at init");
  flags.String("job_id", &s.zero.job_id, "job id on the servers");
  flags.Int64("alignment", &a.alignment, "part / server alignment");
  flags.String("out", &a.out, "rank 0 writes the final parameters here");
  flags.String("port_file", &a.port_file, "rank 0 writes its port here");
  flags.ParseOrExit(argc, argv);
  s.config = {static_cast<int>(max_seq_len), static_cast<int>(vocab),
              static_cast<int>(vocab),       static_cast<int>(layers),
              static_cast<int>(heads),       static_cast<int>(channels)};
  s.zero.stage = static_cast<int>(stage);
  s.zero.offload_param_server = offload;
  s.zero.micro_batch = static_cast<int>(batch);
  s.zero.seq_len = static_cast<int>(seq_len);
  s.zero.gradient_accumulation_steps = static_cast<int>(gas);
  s.zero.reduce_bucket_size = static_cast<uint64_t>(bucket);
  s.zero.stage3_prefetch_units = static_cast<int>(prefetch);
  s.steps = static_cast<int>(steps);
  s.seed = static_cast<uint64_t>(seed);
  const absl::Status st = zeroshard::zero::Run(a);
  if (!st.ok()) {
    std::fprintf(stderr, "zeroshard-train-worker: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
