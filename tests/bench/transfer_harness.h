// transfer_bench's measuring loop: raw-TCP reference, fleet start,
// registration, timed ShardClient Gather/Push with correctness checks,
// CPU/page-fault accounting and the RESULT line. Each gRPC operation is
// run alternately with its TCP reference (common/bench/bench.h).
#ifndef ZEROSHARD_TESTS_BENCH_TRANSFER_HARNESS_H_
#define ZEROSHARD_TESTS_BENCH_TRANSFER_HARNESS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/shard_client.h"
#include "common/bench/bench.h"
#include "common/flags.h"
#include "common/partition.h"

namespace zeroshard {
namespace bench {

// Timings of the measured iterations of one operation plus the CPU the
// client side ("self") and the server side ("peers") spent in them.
struct Samples {
  std::vector<double> seconds;
  CpuTimes self_cpu;
  CpuTimes peer_cpu;

  Summary summary() const { return Summarize(seconds); }
  // GB/s (1e9 bytes) of the median iteration.
  double MedianGbps(uint64_t bytes) const;
  // "median 0.123 s (2.18 GB/s), min .. max ..; per GB: client cpu u+s ..."
  std::string Describe(uint64_t bytes) const;
};

struct HarnessConfig {
  uint64_t bytes = 0;  // of the fp32 range moved
  int iters = 3;       // timed, after one warm-up
  bool gather = true;
  bool push = true;
  std::string server_binary;
  std::vector<std::string> server_args;
  ClientOptions client;
  std::string label = "ShardClient";

  uint64_t elements() const { return bytes / 4; }
};

// One K: the gRPC figures and the raw-TCP reference with K connections,
// measured alternately (a TCP iteration right before each gRPC one), so
// that load from other processes hits both alike.
struct Figures {
  Samples write, gather, push;  // gRPC
  Samples tcp_gather, tcp_push;
};

class TcpPump;

// The raw-TCP reference alone (pump->pairs() connections).
absl::StatusOr<Figures> MeasureTcp(const HarnessConfig& cfg, TcpPump* pump,
                                   char* buffer);

// K servers, interleaved with `pump` (K connections); src holds the
// weights/gradients, out is the gather target.
absl::StatusOr<Figures> MeasureGrpc(const HarnessConfig& cfg, uint32_t k,
                                    TcpPump* pump, const float* src, float* out,
                                    double src_sum_squares);

// Flags shared by the transfer binaries (--mib, --iters, --shards, --ops,
// --tcp_only, --server_args); Finish() validates them into `cfg`.
struct CommonFlags {
  int64_t mib = 256;
  int64_t iters = 3;
  std::string shards = "1,4";
  std::string ops = "gather,push";
  std::string server_args;
  bool tcp_only = false;

  void Register(FlagSet* flags);
  // Exits with a usage error on bad values.
  void Finish(const FlagSet& flags, HarnessConfig* cfg,
              std::vector<uint32_t>* shard_counts) const;
};

// Runs everything for every K in `shards`, printing as it goes, and
// returns the exit code (the RESULT line is the last line printed).
int RunTransfer(const HarnessConfig& cfg, const std::vector<uint32_t>& shards,
                bool tcp_only);

}  // namespace bench
}  // namespace zeroshard

#endif  // ZEROSHARD_TESTS_BENCH_TRANSFER_HARNESS_H_
