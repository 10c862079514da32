#include "tests/bench/transfer_harness.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/model_spec.h"
#include "common/status_macros.h"
#include "fleet/local_fleet.h"
#include "tests/bench/tcp_pump.h"

namespace zeroshard {
namespace bench {
namespace {

v1::ModelSpec BenchSpec(const HarnessConfig& cfg, uint32_t k) {
  v1::ModelSpec spec;
  spec.set_job_id("transfer-bench");
  v1::TensorSpec* t = spec.add_tensors();
  t->set_name("w");
  // bytes = mib × 2^20, so elements = mib × 2^18.
  t->add_shape(static_cast<int64_t>(cfg.elements() >> 18));
  t->add_shape(1 << 18);
  *spec.add_param_groups() = DefaultParamGroup(0.0);
  spec.set_num_servers(k);
  spec.set_alignment(64);
  spec.set_serving_dtype(v1::DTYPE_BF16);
  spec.set_contributions_per_step(1);
  return spec;
}

// Profiling hook: with ZS_PERF_CTL=<fifo>, the timed gRPC operations are
// bracketed by "enable"/"disable" written to perf's control fifo, so that
//   mkfifo ctl; ZS_PERF_CTL=ctl perf record -a -D -1 --control=fifo:ctl ...
// samples only them (not registration, writes or checks);
// ZS_PERF_OP=gather|push limits that to one operation.
void PerfControl(const char* op, bool enable) {
  static const int fd = [] {
    const char* path = std::getenv("ZS_PERF_CTL");
    return path == nullptr ? -1 : open(path, O_WRONLY);
  }();
  if (fd < 0) return;
  const char* only = std::getenv("ZS_PERF_OP");
  if (only != nullptr && std::strcmp(only, op) != 0) return;
  const char* cmd = enable ? "enable\n" : "disable\n";
  if (write(fd, cmd, std::strlen(cmd)) < 0) return;
}

// CPU of this process and of `peers` at one moment.
struct CpuMark {
  CpuTimes self, peers;
};
CpuMark MarkCpu(const std::vector<pid_t>& peers) {
  return CpuMark{ProcessCpu(getpid()), ProcessesCpu(peers)};
}
// Adds one timed iteration of `seconds`, with the CPU between marks a and
// b, to `samples`.
void Record(const CpuMark& a, const CpuMark& b, double seconds,
            Samples* samples) {
  samples->seconds.push_back(seconds);
  samples->self_cpu += b.self - a.self;
  samples->peer_cpu += b.peers - a.peers;
}

Schedule IterSchedule(const HarnessConfig& cfg) {
  return Schedule{/*warmup_rounds=*/1, /*rounds=*/cfg.iters};
}

// The peers fill their buffers with (byte index within the share * 7).
absl::Status CheckTcpPattern(const char* buffer, uint64_t bytes, int pairs) {
  const uint64_t share = (bytes + pairs - 1) / pairs;
  for (uint64_t i = 0; i < bytes; ++i) {
    if (buffer[i] != static_cast<char>((i % share) * 7)) {
      return absl::DataLossError(
          absl::StrCat("TCP reference: wrong byte at ", i));
    }
  }
  return absl::OkStatus();
}

// Runs of one TCP gather (into `buffer`) or push (from it), accounted into
// `samples` unless warm-ups; the warm-up gather's bytes are checked.
RunFn TcpRun(TcpPump* pump, bool gather, char* buffer, uint64_t bytes,
             Samples* samples) {
  return [=](const RunInfo& info) -> absl::StatusOr<double> {
    const CpuMark a = MarkCpu(pump->peer_pids());
    ZS_ASSIGN_OR_RETURN(double s, gather ? pump->Gather(buffer, bytes)
                                         : pump->Push(buffer, bytes));
    const CpuMark b = MarkCpu(pump->peer_pids());
    if (gather && info.warmup) {
      ZS_RETURN_IF_ERROR(CheckTcpPattern(buffer, bytes, pump->pairs()));
    }
    if (!info.warmup) Record(a, b, s, samples);
    return s;
  };
}

}  // namespace

double Samples::MedianGbps(uint64_t bytes) const {
  return Ratio(static_cast<double>(bytes), summary().median) / 1e9;
}

std::string Samples::Describe(uint64_t bytes) const {
  const Summary s = summary();
  const double gb = static_cast<double>(bytes) * seconds.size() / 1e9;
  const double per = gb > 0 ? 1.0 / gb : 0;
  const double mib = static_cast<double>(bytes) * seconds.size() / (1 << 20);
  const double per_mib = mib > 0 ? 1.0 / mib : 0;
  return absl::StrFormat(
      "median %.3f s (%.2f GB/s), min %.3f s, max %.3f s\n"
      "      per GB: client %.2f+%.2f CPU-s (usr+sys), servers %.2f+%.2f; "
      "page faults/MiB: client %.0f, servers %.0f",
      s.median, MedianGbps(bytes), s.min, s.max, self_cpu.user * per,
      self_cpu.sys * per, peer_cpu.user * per, peer_cpu.sys * per,
      self_cpu.faults * per_mib, peer_cpu.faults * per_mib);
}

absl::StatusOr<Figures> MeasureTcp(const HarnessConfig& cfg, TcpPump* pump,
                                   char* buffer) {
  Figures f;
  ZS_RETURN_IF_ERROR(
      RunAlternating(
          {{"tcp_gather", TcpRun(pump, true, buffer, cfg.bytes, &f.tcp_gather)},
           {"tcp_push", TcpRun(pump, false, buffer, cfg.bytes, &f.tcp_push)}},
          IterSchedule(cfg))
          .status());
  return f;
}

absl::StatusOr<Figures> MeasureGrpc(const HarnessConfig& cfg, uint32_t k,
                                    TcpPump* pump, const float* src, float* out,
                                    double src_sum_squares) {
  FleetOptions fo;
  fo.server_binary = cfg.server_binary;
  fo.num_shards = k;
  fo.work_dir = MakeWorkDir(absl::StrCat("transfer_bench_k", k));
  fo.extra_args = cfg.server_args;
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<LocalFleet> fleet, LocalFleet::Start(fo));
  std::vector<pid_t> pids;
  for (uint32_t s = 0; s < k; ++s) pids.push_back(fleet->server(s).pid());
  const uint64_t n = cfg.elements();

  ClientOptions co = cfg.client;
  co.addresses = fleet->addresses();
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<ShardClient> client,
                      ShardClient::Connect(co));
  ZS_RETURN_IF_ERROR(client->RegisterModel(BenchSpec(cfg, k)));
  const Range all{0, n};
  Figures f;

  // WriteParameters (ShardClient's; timed once, for information).
  {
    const CpuMark a = MarkCpu(pids);
    const Clock::time_point start = Clock::now();
    ZS_RETURN_IF_ERROR(client->WriteParameters(all, src));
    const double s = SecondsSince(start);
    Record(a, MarkCpu(pids), s, &f.write);
  }

  // Gathers, each right after a TCP gather into the same buffer; every one
  // (warm-up included) must return the written weights.
  auto gather = [&](const RunInfo& info) -> absl::StatusOr<double> {
    std::memset(out, 0, cfg.bytes);
    const CpuMark a = MarkCpu(pids);
    const Clock::time_point start = Clock::now();
    uint64_t step = 1;
    PerfControl("gather", true);
    const absl::Status gathered =
        client->Gather(all, v1::DTYPE_FP32, out, &step);
    PerfControl("gather", false);
    ZS_RETURN_IF_ERROR(gathered);
    const double s = SecondsSince(start);
    const CpuMark b = MarkCpu(pids);
    if (step != 0) {
      return absl::InternalError(absl::StrCat("gather reported step ", step));
    }
    if (std::memcmp(out, src, cfg.bytes) != 0) {
      uint64_t i = 0;
      while (i < n && std::memcmp(&out[i], &src[i], 4) == 0) ++i;
      return absl::DataLossError(
          absl::StrCat("K=", k,
                       ": gathered data differs from the written weights at "
                       "element ",
                       i, " (got ", out[i], ", wrote ", src[i], ")"));
    }
    if (!info.warmup) Record(a, b, s, &f.gather);
    return s;
  };
  if (cfg.gather) {
    ZS_RETURN_IF_ERROR(
        RunAlternating({{"tcp_gather",
                         TcpRun(pump, true, reinterpret_cast<char*>(out),
                                cfg.bytes, &f.tcp_gather),
                         /*reference=*/true},
                        {"gather", gather}},
                       IterSchedule(cfg))
            .status());
  }

  // Pushes (the gradients are the weights' pattern again), each right after
  // a TCP push of the same bytes; after each, untimed, prepare (which
  // checks the servers' sum of squares) and a skipped commit move every
  // server to the next step.
  uint64_t step = 0;
  auto push = [&](const RunInfo& info) -> absl::StatusOr<double> {
    PushId id;
    id.epoch = 0;
    id.step = step;
    id.slot = 0;
    id.key_prefix = absl::StrCat("bench-push-", step);
    const CpuMark a = MarkCpu(pids);
    const Clock::time_point start = Clock::now();
    PerfControl("push", true);
    const absl::Status pushed = client->Push(all, v1::DTYPE_FP32, src, id);
    PerfControl("push", false);
    ZS_RETURN_IF_ERROR(pushed);
    const double s = SecondsSince(start);
    const CpuMark b = MarkCpu(pids);
    ZS_ASSIGN_OR_RETURN(StepNorm norm, client->Prepare(0, step));
    const double rel = std::fabs(norm.sum_squares - src_sum_squares) /
                       std::max(1.0, src_sum_squares);
    if (norm.overflow || rel > 1e-9) {
      return absl::DataLossError(absl::StrFormat(
          "K=%d push at step %d: servers report sum of squares %.17g "
          "(overflow %d), expected %.17g",
          k, step, norm.sum_squares, norm.overflow, src_sum_squares));
    }
    ZS_RETURN_IF_ERROR(client->Commit(0, step, 1.0f, 0.0, /*skip=*/true));
    ++step;
    if (!info.warmup) Record(a, b, s, &f.push);
    return s;
  };
  if (cfg.push) {
    ZS_RETURN_IF_ERROR(
        RunAlternating(
            {{"tcp_push",
              TcpRun(pump, false,
                     const_cast<char*>(reinterpret_cast<const char*>(src)),
                     cfg.bytes, &f.tcp_push),
              /*reference=*/true},
             {"push", push}},
            IterSchedule(cfg))
            .status());
  }

  ZS_ASSIGN_OR_RETURN(std::vector<v1::GetStatsResponse> stats, client->Stats());
  uint64_t elements = 0, pushed = 0, gathered = 0;
  for (const auto& s : stats) {
    elements += s.elements_applied();
    pushed += s.bytes_pushed();
    gathered += s.bytes_gathered();
    if (s.step() != step) {
      return absl::InternalError(absl::StrCat("shard ", s.shard_index(),
                                              " is at step ", s.step(),
                                              ", expected ", step));
    }
  }
  const uint64_t runs = static_cast<uint64_t>(cfg.iters) + 1;
  const uint64_t pushes = cfg.push ? runs : 0;
  const uint64_t gathers = cfg.gather ? runs : 0;
  if (elements != pushes * n || pushed != pushes * cfg.bytes ||
      gathered != gathers * cfg.bytes) {
    return absl::DataLossError(absl::StrCat(
        "K=", k, ": server stats show ", elements, " elements / ", pushed,
        " bytes pushed and ", gathered, " bytes gathered; expected ",
        pushes * n, " / ", pushes * cfg.bytes, " and ", gathers * cfg.bytes));
  }
  std::printf(
      "  K=%u check: %llu gathers == written weights; %llu pushes "
      "complete (sum of squares as sent); servers applied %llu "
      "elements (%llu bytes) in %llu steps\n",
      k, static_cast<unsigned long long>(gathers),
      static_cast<unsigned long long>(pushes),
      static_cast<unsigned long long>(elements),
      static_cast<unsigned long long>(pushed),
      static_cast<unsigned long long>(step));
  client.reset();
  // A server should exit promptly after SIGTERM (server_main.cc holds a
  // gRPC reference so that exit skips grpc_shutdown(), which in gRPC 1.51
  // can wait ~10 s on a poller thread): allow for a slow one, but say so.
  const Clock::time_point stop_start = Clock::now();
  ZS_RETURN_IF_ERROR(fleet->Stop(std::chrono::milliseconds(15000)));
  const double stop_seconds = SecondsSince(stop_start);
  if (stop_seconds > 3) {
    std::printf(
        "  K=%u warning: the servers took %.1f s to exit after "
        "SIGTERM (LocalFleet's destructor allows 3 s)\n",
        k, stop_seconds);
  }
  std::error_code ec;
  std::filesystem::remove_all(fo.work_dir, ec);
  return f;
}

void CommonFlags::Register(FlagSet* flags) {
  flags->Int64("mib", &mib, "Size of the fp32 range moved, in MiB.");
  flags->Int64("iters", &iters, "Timed iterations after one warm-up.");
  flags->String("shards", &shards, "Comma-separated server counts K.");
  flags->String("ops", &ops,
                "gRPC operations to time: gather and/or push "
                "(comma-separated); one of them for profiling.");
  flags->String("server_args", &server_args,
                "Extra flags for every server, comma-separated.");
  flags->Bool("tcp_only", &tcp_only, "Measure the TCP reference only.");
}

void CommonFlags::Finish(const FlagSet& flags, HarnessConfig* cfg,
                         std::vector<uint32_t>* shard_counts) const {
  if (mib < 1 || mib > (1 << 14)) {
    ExitWithError(flags.program(), "--mib must be in [1, 16384]");
  }
  if (iters < 1 || iters > 1000) {
    ExitWithError(flags.program(), "--iters must be in [1, 1000]");
  }
  cfg->bytes = static_cast<uint64_t>(mib) << 20;
  cfg->iters = static_cast<int>(iters);
  shard_counts->clear();
  for (absl::string_view s : absl::StrSplit(shards, ',')) {
    uint32_t k = 0;
    if (!absl::SimpleAtoi(s, &k) || k == 0 || k > 64) {
      ExitWithError(flags.program(), "--shards must list counts in [1, 64]");
    }
    shard_counts->push_back(k);
  }
  cfg->gather = cfg->push = false;
  for (absl::string_view op : absl::StrSplit(ops, ',')) {
    if (op == "gather") {
      cfg->gather = true;
    } else if (op == "push") {
      cfg->push = true;
    } else {
      ExitWithError(flags.program(), "--ops lists gather and/or push");
    }
  }
  if (!server_args.empty()) {
    cfg->server_args = absl::StrSplit(server_args, ',');
  }
}

int RunTransfer(const HarnessConfig& cfg, const std::vector<uint32_t>& shards,
                bool tcp_only) {
  const uint64_t n = cfg.elements();
  std::vector<float> src(n), out(n);
  FillPattern(src.data(), n);
  std::memset(out.data(), 0, cfg.bytes);
  double sum_squares = 0;
  for (float x : src) sum_squares += static_cast<double>(x) * x;

  std::printf(
      "transfer: %llu MiB fp32 (%llu elements), median of %d (each "
      "alternating with its TCP reference) after 1 warm-up; %ld CPUs "
      "online; client: %s\n",
      static_cast<unsigned long long>(cfg.bytes >> 20),
      static_cast<unsigned long long>(n), cfg.iters,
      sysconf(_SC_NPROCESSORS_ONLN), cfg.label.c_str());

  // Every TCP peer is forked now, before gRPC starts any thread; each K's
  // TCP reference is then measured alternately with its gRPC iterations.
  std::map<uint32_t, std::unique_ptr<TcpPump>> pumps;
  std::vector<uint32_t> pairs = shards;
  pairs.push_back(1);
  for (uint32_t k : pairs) {
    if (pumps.count(k)) continue;
    auto pump = TcpPump::Start(static_cast<int>(k), cfg.bytes);
    if (!pump.ok()) {
      std::fprintf(stderr, "transfer: TCP reference: %s\n",
                   pump.status().ToString().c_str());
      return 1;
    }
    pumps[k] = std::move(*pump);
  }
  auto print_tcp = [&](uint32_t k, const Figures& f) {
    std::printf(
        "  raw TCP, %u connection(s), send/recv of %zu KiB:\n"
        "    peer->client (as gather) %s\n"
        "    client->peer (as push)   %s\n",
        k, kTcpIoBytes >> 10, f.tcp_gather.Describe(cfg.bytes).c_str(),
        f.tcp_push.Describe(cfg.bytes).c_str());
  };

  std::map<uint32_t, Figures> figures;
  ResultLine tcp_result;  // --tcp_only
  for (uint32_t k : shards) {
    if (tcp_only) {
      auto f =
          MeasureTcp(cfg, pumps[k].get(), reinterpret_cast<char*>(out.data()));
      if (!f.ok()) {
        std::fprintf(stderr, "transfer: TCP reference: %s\n",
                     f.status().ToString().c_str());
        return 1;
      }
      print_tcp(k, *f);
      tcp_result
          .Add(absl::StrCat("tcp_recv_gbps_p", k),
               f->tcp_gather.MedianGbps(cfg.bytes))
          .Add(absl::StrCat("tcp_send_gbps_p", k),
               f->tcp_push.MedianGbps(cfg.bytes));
      continue;
    }
    auto f = MeasureGrpc(cfg, k, pumps[k].get(), src.data(), out.data(),
                         sum_squares);
    if (!f.ok()) {
      std::fprintf(stderr, "transfer: K=%u: %s\n", k,
                   f.status().ToString().c_str());
      return 1;
    }
    std::printf(
        "K=%u, gRPC %s:\n"
        "  WriteParameters %s\n  Gather          %s\n"
        "  Push            %s\n",
        k, cfg.label.c_str(), f->write.Describe(cfg.bytes).c_str(),
        f->gather.Describe(cfg.bytes).c_str(),
        f->push.Describe(cfg.bytes).c_str());
    print_tcp(k, *f);
    std::fflush(stdout);
    figures[k] = *f;
  }
  if (tcp_only) {
    tcp_result.Print();
    return 0;
  }
  if (!figures.count(1)) {  // the single-connection reference
    auto f =
        MeasureTcp(cfg, pumps[1].get(), reinterpret_cast<char*>(out.data()));
    if (!f.ok()) {
      std::fprintf(stderr, "transfer: TCP reference: %s\n",
                   f.status().ToString().c_str());
      return 1;
    }
    print_tcp(1, *f);
    figures[1].tcp_gather = f->tcp_gather;
    figures[1].tcp_push = f->tcp_push;
  }

  std::printf("\n%-4s %14s %14s %8s %14s %14s %8s  (medians)\n", "K",
              "gather GB/s", "tcp recv GB/s", "ratio", "push GB/s",
              "tcp send GB/s", "ratio");
  double gather_ratio = 1e30, push_ratio = 1e30;
  ResultLine gathers, pushes, tail;
  for (uint32_t k : shards) {
    const double g = figures[k].gather.MedianGbps(cfg.bytes);
    const double p = figures[k].push.MedianGbps(cfg.bytes);
    const double tg = figures[k].tcp_gather.MedianGbps(cfg.bytes);
    const double tp = figures[k].tcp_push.MedianGbps(cfg.bytes);
    const double rg = Ratio(g, tg), rp = Ratio(p, tp);
    gather_ratio = std::min(gather_ratio, rg);
    push_ratio = std::min(push_ratio, rp);
    std::printf("%-4u %14.2f %14.2f %8.3f %14.2f %14.2f %8.3f\n", k, g, tg, rg,
                p, tp, rp);
    gathers.Add(absl::StrCat("gather_gbps_k", k), g);
    pushes.Add(absl::StrCat("push_gbps_k", k), p);
    tail.Add(absl::StrCat("gather_vs_tcp_k", k), rg)
        .Add(absl::StrCat("push_vs_tcp_k", k), rp)
        .Add(absl::StrCat("tcp_recv_gbps_p", k), tg)
        .Add(absl::StrCat("tcp_send_gbps_p", k), tp);
  }
  const double tcp_ref = std::min(figures[1].tcp_gather.MedianGbps(cfg.bytes),
                                  figures[1].tcp_push.MedianGbps(cfg.bytes));
  ResultLine result;
  result.Add("gather_vs_tcp", gather_ratio).Add("push_vs_tcp", push_ratio);
  result.Append(gathers).Append(pushes).Add("tcp_gbps", tcp_ref).Append(tail);
  result.Print();
  return 0;
}

}  // namespace bench
}  // namespace zeroshard
