// transfer_bench: data-plane throughput of ShardClient (Gather and Push of
// a large fp32 range) against K real zeroshard-server processes on
// loopback, beside the raw-TCP reference: plain send/recv of 1 MiB buffers
// over K parallel loopback connections to K forked peer processes (see
// tcp_pump.h), timed alternately with the gRPC iterations (a TCP iteration
// right before each gRPC one, common/bench/bench.h) so that load from other
// processes hits both.
//
//   bazel run -c opt //tests/bench:transfer_bench -- --mib=256 --iters=3
//
// For each K in --shards (default 1,4): registers one fp32 tensor of --mib
// MiB (alignment 64, BF16 serving, one contribution per step), writes known
// weights with WriteParameters, then times Gather(all, FP32) and
// Push(all, FP32) (a fresh idempotency key per iteration; between pushes,
// untimed, PrepareStep + CommitStep(skip) move the servers to the next
// step). One warm-up iteration, then --iters timed ones; the median is
// reported (min and max are printed too). Correctness is checked in the same
// run: every gather returns exactly the written bytes, every push is
// complete on every server with the sum of squares of the sent data, and
// the servers' counters show every pushed and gathered byte.
//
// Besides wall time it prints, per GB moved, the CPU seconds of the client
// and of the servers and their minor page faults per MiB (≈256 means every
// byte landed in a freshly mapped page): on a small machine the data plane
// is CPU-bound and that is where the time goes.
//
// Last line:
//   RESULT gather_vs_tcp=R push_vs_tcp=R gather_gbps_k1=G gather_gbps_k4=G
//          push_gbps_k1=P push_gbps_k4=P tcp_gbps=T [per-K details]
// gather_vs_tcp / push_vs_tcp: the smallest over K of the gRPC GB/s divided
// by the TCP reference with K connections in the same direction
// (peer->client for gather, client->peer for push). tcp_gbps: the
// single-connection reference (the slower of its two directions). Every
// GB/s is that of the median iteration; GB = 1e9 bytes. Timings on a
// shared machine are noisy: compare the ratios of one run, not absolute
// figures across runs.
//
// Profiling: with ZS_PERF_CTL=<fifo> (and optionally ZS_PERF_OP=gather or
// push) only the timed gRPC operations are sampled:
//   mkfifo ctl; ZS_PERF_CTL=ctl perf record -a -D -1 --control=fifo:ctl
//       -- bazel-bin/tests/bench/transfer_bench --shards=1 --iters=10
//
// As any process that moves much data should, it calls
// TuneMallocForTransfers() first (common/malloc_tuning.h); so do the
// servers.
#include "absl/strings/str_cat.h"
#include "client/shard_client.h"
#include "common/flags.h"
#include "common/malloc_tuning.h"
#include "fleet/local_fleet.h"
#include "tests/bench/transfer_harness.h"

namespace zeroshard {
namespace bench {
namespace {

int Main(int argc, char** argv) {
  TuneMallocForTransfers();
  CommonFlags common;
  int64_t channels = ClientOptions().channels_per_server;
  int64_t piece_mib =
      static_cast<int64_t>(ClientOptions().max_piece_bytes >> 20);
  int64_t shared_piece_mib =
      static_cast<int64_t>(ClientOptions().max_shared_piece_bytes >> 20);
  FlagSet flags("transfer_bench",
                "transfer_bench [flags]\n\n"
                "Gather/Push GB/s of ShardClient against K local shard "
                "servers, beside raw TCP.");
  common.Register(&flags);
  flags.Int64("channels_per_server", &channels,
              "ClientOptions.channels_per_server.");
  flags.Int64("max_piece_mib", &piece_mib,
              "ClientOptions.max_piece_bytes, in MiB.");
  flags.Int64("max_shared_piece_mib", &shared_piece_mib,
              "ClientOptions.max_shared_piece_bytes, in MiB.");
  const std::vector<std::string> rest = flags.ParseOrExit(argc, argv);
  if (!rest.empty()) ExitWithError(flags.program(), "unexpected argument");
  HarnessConfig cfg;
  std::vector<uint32_t> shards;
  common.Finish(flags, &cfg, &shards);
  if (channels < 1 || channels > 64 || piece_mib < 1 || shared_piece_mib < 1) {
    ExitWithError(flags.program(),
                  "--channels_per_server must be in [1, 64], "
                  "--max_piece_mib and --max_shared_piece_mib >= 1");
  }
  cfg.client.channels_per_server = static_cast<int>(channels);
  cfg.client.max_piece_bytes = static_cast<uint64_t>(piece_mib) << 20;
  cfg.client.max_shared_piece_bytes = static_cast<uint64_t>(shared_piece_mib)
                                      << 20;
  cfg.label =
      absl::StrCat("ShardClient (", channels, " channel(s)/server, pieces of ",
                   piece_mib, " MiB, ", shared_piece_mib, " MiB shared)");

  auto binary = WorkspaceBinary("server/zeroshard-server");
  if (!binary.ok()) {
    ExitWithError(flags.program(), std::string(binary.status().message()), 1);
  }
  cfg.server_binary = *binary;
  return RunTransfer(cfg, shards, common.tcp_only);
}

}  // namespace
}  // namespace bench
}  // namespace zeroshard

int main(int argc, char** argv) { return zeroshard::bench::Main(argc, argv); }
