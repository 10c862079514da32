// transfer_bench: data-plane throughput of ShardClient (Gather and Push of
// a large fp32 range) against K real zeroshard-server processes on
// loopback, measured in the same run as the raw-TCP reference (plain
// send/recv of 1 MiB buffers over K parallel loopback connections, see
// tcp_pump.h).
//
//   bazel run -c opt //tests/bench:transfer_bench -- --mib=256 --iters=3
//
// For each K in --shards: registers one fp32 tensor of --mib MiB (alignment
// 64, BF16 serving, one contribution per step), writes known weights, then
// times Gather(all, FP32) and Push(all, FP32) (a fresh idempotency key per
// iteration; between pushes, untimed, PrepareStep + CommitStep(skip) move
// the servers to the next step). One warm-up iteration, then --iters timed
// ones; the best is reported. Correctness is checked in the same run:
// gathered bytes equal the written ones, every push is complete on every
// server with the expected sum of squares, and the servers' counters show
// every pushed element.
//
// Besides wall time, the CPU seconds per GB of the client and of the
// servers are printed: on a small machine the data plane is CPU-bound and
// that is where the time goes.
//
// Last line:
//   RESULT gather_vs_tcp=R push_vs_tcp=R gather_gbps_k1=G ... tcp_gbps=T ...
// gather_vs_tcp / push_vs_tcp: the smallest over K of gRPC GB/s divided by
// the TCP reference with K connections in the same direction (peer->client
// for gather, client->peer for push). tcp_gbps: the single-connection
// reference (the slower of its two directions); tcp_*_gbps_pK the others.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/local_fleet.h"
#include "client/shard_client.h"
#include "common/flags.h"
#include "common/model_spec.h"
#include "common/status_macros.h"
#include "tests/bench/bench_util.h"
#include "tests/bench/tcp_pump.h"

namespace zeroshard {
namespace bench {
namespace {

struct Config {
  uint64_t bytes = 0;
  uint64_t elements = 0;
  int iters = 3;
  bool gather = true, push = true;  // --ops
  ClientOptions client;  // addresses filled per fleet
  std::vector<std::string> server_args;
};

struct TcpFigures {
  Samples gather, push;
};

struct GrpcFigures {
  Samples write, gather, push;
};

// Raw-TCP reference with `pairs` connections.
absl::StatusOr<TcpFigures> MeasureTcp(const Config& cfg, int pairs,
                                      char* buffer) {
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<TcpPump> pump,
                      TcpPump::Start(pairs, cfg.bytes));
  TcpFigures f;
  const pid_t self = getpid();
  for (int it = 0; it <= cfg.iters; ++it) {
    const CpuTimes c0 = ProcessCpu(self), p0 = ProcessesCpu(pump->peer_pids());
    ZS_ASSIGN_OR_RETURN(double s, pump->Gather(buffer, cfg.bytes));
    const CpuTimes c1 = ProcessCpu(self), p1 = ProcessesCpu(pump->peer_pids());
    ZS_ASSIGN_OR_RETURN(double t, pump->Push(buffer, cfg.bytes));
    const CpuTimes c2 = ProcessCpu(self), p2 = ProcessesCpu(pump->peer_pids());
    if (it == 0) continue;  // warm-up
    f.gather.seconds.push_back(s);
    f.gather.self_cpu += c1 - c0;
    f.gather.peer_cpu += p1 - p0;
    f.push.seconds.push_back(t);
    f.push.self_cpu += c2 - c1;
    f.push.peer_cpu += p2 - p1;
  }
  // The peers fill their buffers with (byte index * 7).
  const uint64_t share = (cfg.bytes + pairs - 1) / pairs;
  for (uint64_t i = 0; i < cfg.bytes; ++i) {
    if (buffer[i] != static_cast<char>((i % share) * 7)) {
      return absl::DataLossError(
          absl::StrCat("TCP reference: wrong byte at ", i));
    }
  }
  return f;
}

v1::ModelSpec BenchSpec(const Config& cfg, uint32_t k) {
  v1::ModelSpec spec;
  spec.set_job_id("transfer-bench");
  v1::TensorSpec* t = spec.add_tensors();
  t->set_name("w");
  // elements = mib × 2^18 fp32.
  t->add_shape(static_cast<int64_t>(cfg.elements >> 18));
  t->add_shape(1 << 18);
  *spec.add_param_groups() = DefaultParamGroup(0.0);
  spec.set_num_servers(k);
  spec.set_alignment(64);
  spec.set_serving_dtype(v1::DTYPE_BF16);
  spec.set_contributions_per_step(1);
  return spec;
}

absl::StatusOr<GrpcFigures> MeasureGrpc(const Config& cfg, uint32_t k,
                                        const std::string& server_binary,
                                        const float* src, float* out,
                                        double expected_sum_squares) {
  FleetOptions fo;
  fo.server_binary = server_binary;
  fo.num_shards = k;
  fo.work_dir = MakeWorkDir(absl::StrCat("transfer_bench_k", k));
  fo.extra_args = cfg.server_args;
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<LocalFleet> fleet, LocalFleet::Start(fo));
  std::vector<pid_t> pids;
  for (uint32_t s = 0; s < k; ++s) pids.push_back(fleet->server(s).pid());
  const pid_t self = getpid();

  ClientOptions co = cfg.client;
  co.addresses = fleet->addresses();
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<ShardClient> client,
                      ShardClient::Connect(co));
  ZS_RETURN_IF_ERROR(client->RegisterModel(BenchSpec(cfg, k)));
  const Range all{0, cfg.elements};
  GrpcFigures f;

  // WriteParameters (timed once, for information).
  {
    const CpuTimes c0 = ProcessCpu(self), p0 = ProcessesCpu(pids);
    const auto start = std::chrono::steady_clock::now();
    ZS_RETURN_IF_ERROR(client->WriteParameters(all, src));
    f.write.seconds.push_back(std::chrono::duration<double>(
                                  std::chrono::steady_clock::now() - start)
                                  .count());
    f.write.self_cpu += ProcessCpu(self) - c0;
    f.write.peer_cpu += ProcessesCpu(pids) - p0;
  }

  // Gather.
  for (int it = 0; cfg.gather && it <= cfg.iters; ++it) {
    std::memset(out, 0, cfg.bytes);
    const CpuTimes c0 = ProcessCpu(self), p0 = ProcessesCpu(pids);
    const auto start = std::chrono::steady_clock::now();
    uint64_t step = 1;
    ZS_RETURN_IF_ERROR(client->Gather(all, v1::DTYPE_FP32, out, &step));
    const double s = std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - start)
                         .count();
    const CpuTimes c1 = ProcessCpu(self), p1 = ProcessesCpu(pids);
    if (step != 0) {
      return absl::InternalError(absl::StrCat("gather reported step ", step));
    }
    if (std::memcmp(out, src, cfg.bytes) != 0) {
      uint64_t i = 0;
      while (i < cfg.elements && std::memcmp(&out[i], &src[i], 4) == 0) ++i;
      return absl::DataLossError(absl::StrCat(
          "K=", k, ": gathered data differs from the written weights at "
          "element ", i, " (got ", out[i], ", wrote ", src[i], ")"));
    }
    if (it == 0) continue;
    f.gather.seconds.push_back(s);
    f.gather.self_cpu += c1 - c0;
    f.gather.peer_cpu += p1 - p0;
  }

  // Push (the gradients are the weights' pattern again).
  uint64_t step = 0;
  for (int it = 0; cfg.push && it <= cfg.iters; ++it, ++step) {
    PushId id;
    id.epoch = 0;
    id.step = step;
    id.slot = 0;
    id.key_prefix = absl::StrCat("bench-push-", it);
    const CpuTimes c0 = ProcessCpu(self), p0 = ProcessesCpu(pids);
    const auto start = std::chrono::steady_clock::now();
    ZS_RETURN_IF_ERROR(client->Push(all, v1::DTYPE_FP32, src, id));
    const double s = std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - start)
                         .count();
    const CpuTimes c1 = ProcessCpu(self), p1 = ProcessesCpu(pids);
    ZS_ASSIGN_OR_RETURN(StepNorm norm, client->Prepare(0, step));
    const double rel = std::fabs(norm.sum_squares - expected_sum_squares) /
                       std::max(1.0, expected_sum_squares);
    if (norm.overflow || rel > 1e-9) {
      return absl::DataLossError(absl::StrFormat(
          "K=%d push %d: servers report sum of squares %.17g (overflow %d), "
          "expected %.17g",
          k, it, norm.sum_squares, norm.overflow, expected_sum_squares));
    }
    ZS_RETURN_IF_ERROR(client->Commit(0, step, 1.0f, 0.0, /*skip=*/true));
    if (it == 0) continue;
    f.push.seconds.push_back(s);
    f.push.self_cpu += c1 - c0;
    f.push.peer_cpu += p1 - p0;
  }

  ZS_ASSIGN_OR_RETURN(std::vector<v1::GetStatsResponse> stats,
                      client->Stats());
  uint64_t elements = 0, pushed = 0, gathered = 0, steps = 0;
  for (const auto& s : stats) {
    elements += s.elements_applied();
    pushed += s.bytes_pushed();
    gathered += s.bytes_gathered();
    steps = std::max(steps, s.step());
    if (s.step() != step) {
      return absl::InternalError(absl::StrCat("shard ", s.shard_index(),
                                              " is at step ", s.step(),
                                              ", expected ", step));
    }
  }
  const uint64_t runs = static_cast<uint64_t>(cfg.iters) + 1;
  const uint64_t pushes = cfg.push ? runs : 0;
  const uint64_t gathers = cfg.gather ? runs : 0;
  if (elements != pushes * cfg.elements || pushed != pushes * cfg.bytes ||
      gathered != gathers * cfg.bytes) {
    return absl::DataLossError(absl::StrCat(
        "K=", k, ": server stats show ", elements, " elements / ", pushed,
        " bytes pushed and ", gathered, " bytes gathered; expected ",
        pushes * cfg.elements, " / ", pushes * cfg.bytes, " and ",
        gathers * cfg.bytes));
  }
  std::printf("  K=%u check: gathered == written; %llu pushes complete, "
              "servers applied %llu elements (%llu bytes) in %llu steps\n",
              k, static_cast<unsigned long long>(pushes),
              static_cast<unsigned long long>(elements),
              static_cast<unsigned long long>(pushed),
              static_cast<unsigned long long>(steps));
  ZS_RETURN_IF_ERROR(fleet->Stop(std::chrono::milliseconds(5000)));
  std::error_code ec;
  std::filesystem::remove_all(fo.work_dir, ec);
  return f;
}

int Main(int argc, char** argv) {
  int64_t mib = 256;
  int64_t iters = 3;
  std::string shards_text = "1,4";
  int64_t channels = ClientOptions().channels_per_server;
  int64_t piece_mib =
      static_cast<int64_t>(ClientOptions().max_piece_bytes >> 20);
  std::string server_args;
  std::string ops = "gather,push";
  bool tcp_only = false;
  FlagSet flags("transfer_bench",
                "transfer_bench [flags]\n\n"
                "Gather/Push GB/s of ShardClient against K local shard "
                "servers, beside raw TCP.");
  flags.Int64("mib", &mib, "Size of the fp32 range moved, in MiB.");
  flags.Int64("iters", &iters, "Timed iterations after one warm-up.");
  flags.String("shards", &shards_text, "Comma-separated server counts K.");
  flags.Int64("channels_per_server", &channels,
              "ClientOptions.channels_per_server.");
  flags.Int64("max_piece_mib", &piece_mib,
              "ClientOptions.max_piece_bytes, in MiB.");
  flags.String("server_args", &server_args,
               "Extra flags for every server, comma-separated.");
  flags.String("ops", &ops,
               "Which gRPC operations to time: gather, push or both "
               "(comma-separated); for profiling one of them.");
  flags.Bool("tcp_only", &tcp_only, "Measure the TCP reference only.");
  const std::vector<std::string> rest = flags.ParseOrExit(argc, argv);
  if (!rest.empty()) ExitWithError(flags.program(), "unexpected argument");
  if (mib < 1 || mib > (1 << 14)) {
    ExitWithError(flags.program(), "--mib must be in [1, 16384]");
  }
  if (iters < 1) ExitWithError(flags.program(), "--iters must be >= 1");
  std::vector<uint32_t> shards;
  for (absl::string_view s : absl::StrSplit(shards_text, ',')) {
    uint32_t k = 0;
    if (!absl::SimpleAtoi(s, &k) || k == 0 || k > 64) {
      ExitWithError(flags.program(), "--shards must list counts in [1, 64]");
    }
    shards.push_back(k);
  }

  Config cfg;
  cfg.bytes = static_cast<uint64_t>(mib) << 20;
  cfg.elements = cfg.bytes / 4;
  cfg.iters = static_cast<int>(iters);
  cfg.client.channels_per_server = static_cast<int>(channels);
  cfg.client.max_piece_bytes = static_cast<uint64_t>(piece_mib) << 20;
  cfg.gather = cfg.push = false;
  for (absl::string_view op : absl::StrSplit(ops, ',')) {
    if (op == "gather") {
      cfg.gather = true;
    } else if (op == "push") {
      cfg.push = true;
    } else {
      ExitWithError(flags.program(), "--ops lists gather and/or push");
    }
  }
  if (!server_args.empty()) {
    cfg.server_args = absl::StrSplit(server_args, ',');
  }

  auto binary = WorkspaceBinary("server/zeroshard-server");
  if (!binary.ok()) {
    std::fprintf(stderr, "transfer_bench: %s\n",
                 std::string(binary.status().message()).c_str());
    return 1;
  }

  std::vector<float> src(cfg.elements), out(cfg.elements);
  FillPattern(src.data(), cfg.elements);
  std::memset(out.data(), 0, cfg.bytes);
  double sum_squares = 0;
  for (float x : src) sum_squares += static_cast<double>(x) * x;

  std::printf("transfer_bench: %lld MiB fp32 (%llu elements), best of %d "
              "after 1 warm-up; %ld CPUs online\n",
              static_cast<long long>(mib),
              static_cast<unsigned long long>(cfg.elements), cfg.iters,
              sysconf(_SC_NPROCESSORS_ONLN));

  // The TCP references first: TcpPump forks, so it must run before gRPC
  // starts any thread.
  std::map<uint32_t, TcpFigures> tcp;
  for (uint32_t k : shards) {
    if (tcp.count(k)) continue;
    auto f = MeasureTcp(cfg, static_cast<int>(k),
                        reinterpret_cast<char*>(out.data()));
    if (!f.ok()) {
      std::fprintf(stderr, "transfer_bench: TCP reference: %s\n",
                   f.status().ToString().c_str());
      return 1;
    }
    std::printf("raw TCP, %u connection(s):\n  peer->client (as gather) %s\n"
                "  client->peer (as push)   %s\n",
                k, f->gather.Describe(cfg.bytes).c_str(),
                f->push.Describe(cfg.bytes).c_str());
    std::fflush(stdout);
    tcp[k] = *f;
  }
  if (!tcp.count(1)) {
    auto f = MeasureTcp(cfg, 1, reinterpret_cast<char*>(out.data()));
    if (!f.ok()) {
      std::fprintf(stderr, "transfer_bench: TCP reference: %s\n",
                   f.status().ToString().c_str());
      return 1;
    }
    tcp[1] = *f;
  }

  std::map<uint32_t, GrpcFigures> grpc;
  for (uint32_t k : shards) {
    if (tcp_only) break;
    auto f = MeasureGrpc(cfg, k, *binary, src.data(), out.data(), sum_squares);
    if (!f.ok()) {
      std::fprintf(stderr, "transfer_bench: K=%u: %s\n", k,
                   f.status().ToString().c_str());
      return 1;
    }
    std::printf("gRPC ShardClient, K=%u server(s), %d channel(s)/server:\n"
                "  WriteParameters %s\n  Gather          %s\n"
                "  Push            %s\n",
                k, cfg.client.channels_per_server,
                f->write.Describe(cfg.bytes).c_str(),
                f->gather.Describe(cfg.bytes).c_str(),
                f->push.Describe(cfg.bytes).c_str());
    std::fflush(stdout);
    grpc[k] = *f;
  }

  if (tcp_only) return 0;
  std::printf("\n%-4s %14s %14s %8s %14s %14s %8s\n", "K", "gather GB/s",
              "tcp recv GB/s", "ratio", "push GB/s", "tcp send GB/s", "ratio");
  double gather_ratio = 1e30, push_ratio = 1e30;
  std::string result_k;
  for (uint32_t k : shards) {
    const double g = grpc[k].gather.BestGbps(cfg.bytes);
    const double p = grpc[k].push.BestGbps(cfg.bytes);
    const double tg = tcp[k].gather.BestGbps(cfg.bytes);
    const double tp = tcp[k].push.BestGbps(cfg.bytes);
    const double rg = tg > 0 ? g / tg : 0, rp = tp > 0 ? p / tp : 0;
    gather_ratio = std::min(gather_ratio, rg);
    push_ratio = std::min(push_ratio, rp);
    std::printf("%-4u %14.2f %14.2f %8.3f %14.2f %14.2f %8.3f\n", k, g, tg, rg,
                p, tp, rp);
    absl::StrAppendFormat(
        &result_k,
        " gather_gbps_k%u=%.3f push_gbps_k%u=%.3f gather_vs_tcp_k%u=%.3f "
        "push_vs_tcp_k%u=%.3f tcp_recv_gbps_p%u=%.3f tcp_send_gbps_p%u=%.3f",
        k, g, k, p, k, rg, k, rp, k, tg, k, tp);
  }
  const double tcp_ref = std::min(tcp[1].gather.BestGbps(cfg.bytes),
                                  tcp[1].push.BestGbps(cfg.bytes));
  std::printf("RESULT gather_vs_tcp=%.3f push_vs_tcp=%.3f%s tcp_gbps=%.3f\n",
              gather_ratio, push_ratio, result_k.c_str(), tcp_ref);
  return 0;
}

}  // namespace
}  // namespace bench
}  // namespace zeroshard

int main(int argc, char** argv) { return zeroshard::bench::Main(argc, argv); }
