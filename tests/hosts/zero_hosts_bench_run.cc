// One profile of the benchmark on test hosts (zero_hosts_bench.sh runs it
// inside `tools/netlab.sh run`, once per link profile): K = 2 shard servers
// on hosts srv0 and srv1, W = 4 workers as 2 nodes × 2 ranks on hosts node0
// (ranks 0, 1) and node1 (ranks 2, 3) — real zeroshard-server and
// zeroshard-worker processes started in the hosts with `netlab.sh exec`,
// UCX across the nodes over the shaped veth links, in-node collectives
// local (ZEROSHARD_LOCAL_SIZE=2). The GPT-2 and training options of
// worker/engine/zero_bench.cc (L=4, C=128, B=4, T=64, clipping 1.0,
// buckets of 128 Ki elements).
//
// Variants, alternated round by round (common/bench/bench.h): stage 0
// (DDP), 2, 3 and 3 with offload_param_server, each with overlap_comm on
// and off, and stage 2 with the one-step delayed update from step 2
// (zero2_delayed; opt-in, other arithmetic); each at every
// reduce_bucket_size of --buckets (default 128 Ki, zero_bench's, and
// DeepSpeed's default 5e8, one bucket of this model), named <variant>_b<size>
// when there are several. A run's figure is the median of
// rank 0's step periods after the first step (period_seconds of its metrics
// file: from one step's end to the next's, so that work moved between the steps
// counts too); a variant's is the median over its runs. Best against best:
// each stage's fastest setting (overlap on or off, at any bucket size).
// Correctness in the same run: every run's per-step losses (7 digits) must
// equal the first DDP run's (a delayed variant's, its own first run's).
//
// --only runs some variants (the first named is the reference).
//
//   zero_hosts_bench_run --profile=10g --worker=... --server=...
//       --netlab=tools/netlab.sh --dir=/tmp/x [--rounds=3] [--steps=12]
//       [--prefetch=-1] [--reuse_distance=1000000000]
//       [--buckets=131072,500000000]
//       [--allgather_bucket=-1]
//       [--only=ddp,zero3]
//
// Every ratio comes with its 95 % bootstrap interval over the runs
// (bench::BootstrapMedians): with 4 workers and 2 servers on a few cores a
// run of one variant moves by several per cent, and the interval says
// whether a ratio's distance from 1 is more than that.
//
// Host addresses come from NETLAB_IP_<host>. Its last line:
//   PROFILE <name> zero3_vs_ddp=<best stage 3 / best stage 0>
//     zero3_vs_ddp_lo=<interval's low end> zero3_vs_ddp_hi=<high end>
//     zero3_offload_vs_ddp=... zero2_vs_ddp=... zero2_delayed_vs_ddp=...
//     (each with _lo and _hi)
//     overlap_<stage>=<on / off at its worst bucket size> (_lo, _hi;
//     stages ddp, zero2, zero3, zero3_offload)
//     overlap_vs_no_overlap_worst=<max over stages and bucket sizes>
//     overlap_slower_stages=<(stage, bucket size) pairs whose interval
//     lies wholly above 1>
//     correct=0|1
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/bench/bench.h"
#include "common/flags.h"
#include "common/subprocess.h"
#include "worker/engine/testing.h"

namespace zeroshard {
namespace {

constexpr int kWorld = 4, kLocal = 2, kServers = 2;
// Rank 0's step, by phase (the metrics file's phase_seconds, then
// "between": period_seconds - step_seconds, what ran between two steps).
constexpr int kPhases = 9;
const char* const kPhaseKeys[kPhases - 1] = {
    "forward", "backward",    "reduce_wait", "push",
    "sync",    "server_step", "gather",      "all_gather_wait"};
const char* const kPhaseNames[kPhases] = {"fwd",    "bwd",     "rs_wait",
                                          "push",   "sync",    "srv_step",
                                          "gather", "ag_wait", "between"};
const char* const kServerHosts[kServers] = {"srv0", "srv1"};
const char* const kNodeHosts[kWorld / kLocal] = {"node0", "node1"};

struct Paths {
  std::string worker, server, netlab, dir, data, profile;
  // Stage 3, as DeepSpeed's defaults have it unless flags say otherwise:
  // units gathered ahead (-1: stage3_prefetch_bucket_size 5e7 elements,
  // every unit of this model) and stage3_max_reuse_distance (1e9: a unit
  // stays from its forward to its backward).
  int64_t prefetch = -1;
  int64_t reuse_distance = 1000000000;
  // reduce_bucket_size (elements): every variant runs at each. 128 Ki
  // (zero_bench's: buckets to overlap) and DeepSpeed's default 5e8 (one
  // bucket of this model: the fewest operations).
  std::vector<int64_t> buckets = {1 << 17, 500000000};
  // allgather_bucket_size (stages 1-2); -1: the engine's default (5e8).
  int64_t allgather_bucket = -1;
  // Variants to run (names, comma-separated; empty: all). The ratios of
  // variants left out print as nan.
  std::string only;
};

struct Variant {
  std::string name;  // base name, then _b<bucket> with several buckets
  int stage;
  bool offload;
  bool overlap;
  // ZeroOptions::delayed_update_from (0: off). Such a variant's losses
  // differ from DDP's from that step on: its runs are checked against its
  // own first run, and the steps before against DDP's.
  int delayed_from = 0;
  std::string base;    // the name --only and the ratios use
  int64_t bucket = 0;  // reduce_bucket_size
};

// A run of `stage` (its base name), overlap on or off.
bool OfStage(const Variant& v, const std::string& stage) {
  return v.base == stage || v.base == stage + "_no_overlap";
}

// What a variant's name gets at reduce_bucket_size `b`: "_b<b>" when the
// benchmark runs several sizes, else nothing.
std::string BucketSuffix(const std::vector<int64_t>& buckets, int64_t b) {
  return buckets.size() > 1 ? absl::StrCat("_b", b) : "";
}

struct Record {
  std::vector<double> phases[kPhases];  // each run's medians
  int runs = 0, same = 0;
};

std::string HostIp(const std::string& host) {
  const char* ip = std::getenv(("NETLAB_IP_" + host).c_str());
  return ip != nullptr ? ip : "";
}

train::TrainSpec Spec(const Paths& p, const Variant& v, int steps) {
  train::TrainSpec s;
  s.config.max_seq_len = 64;
  s.config.vocab_size = 512;
  s.config.padded_vocab_size = 512;
  s.config.num_layers = 4;
  s.config.num_heads = 4;
  s.config.channels = 128;
  s.zero.stage = v.stage;
  s.zero.offload_param_server = v.offload;
  s.zero.overlap_comm = v.overlap;
  s.zero.delayed_update_from = v.delayed_from;
  s.zero.stage3_prefetch_units =
      p.prefetch < 0 ? s.config.num_layers + 2 : static_cast<int>(p.prefetch);
  s.zero.stage3_max_reuse_distance = static_cast<uint64_t>(p.reuse_distance);
  s.zero.micro_batch = 4;
  s.zero.seq_len = 64;
  s.zero.gradient_clipping = 1.0;
  s.zero.lr_schedule.lr = 1e-3;
  s.zero.reduce_bucket_size = static_cast<uint64_t>(v.bucket);
  if (p.allgather_bucket >= 0) {
    s.zero.allgather_bucket_size = static_cast<uint64_t>(p.allgather_bucket);
  }
  s.zero.job_id = std::string("zero_hosts_bench_") + v.name;
  s.steps = steps;
  s.seed = 7;
  s.data = {p.data};
  return s;
}

// `argv` run in host `host` (netlab.sh exec).
absl::StatusOr<Subprocess> SpawnIn(const Paths& p, const std::string& host,
                                   std::vector<std::string> argv,
                                   std::vector<std::string> env,
                                   const std::string& log) {
  SpawnOptions o;
  o.argv = {p.netlab, "exec", host};
  for (std::string& a : argv) o.argv.push_back(std::move(a));
  o.env = std::move(env);
  o.log_path = log;
  return Subprocess::Spawn(o);
}

// The first line of `path` once it exists, waiting up to 30 s.
std::string WaitForLine(const std::string& path) {
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  std::string line;
  while (line.empty() && absl::Now() < give_up) {
    std::ifstream(path) >> line;
    if (line.empty()) absl::SleepFor(absl::Milliseconds(10));
  }
  return line;
}

// The number after "\"key\":" in a JSON line; NaN when absent.
double JsonValue(const std::string& line, const std::string& key) {
  const size_t at = line.find("\"" + key + "\":");
  if (at == std::string::npos) return std::nan("");
  return std::strtod(line.c_str() + at + key.size() + 3, nullptr);
}

// One run of `v`; the median of rank 0's step periods after the first.
// `losses0`: the first run's losses (the first variant's); `own`: a
// delayed variant's first run's.
absl::StatusOr<double> RunOnce(const Paths& p, const Variant& v, int steps,
                               int round, std::vector<std::string>* losses0,
                               std::vector<std::string>* own, Record* rec) {
  const std::string dir = absl::StrCat(p.dir, "/", v.name, "-", round);
  if (std::system(
          absl::StrCat("rm -rf '", dir, "' && mkdir -p '", dir, "'").c_str()) !=
      0) {
    return absl::InternalError("cannot make " + dir);
  }
  std::vector<Subprocess> servers;
  std::vector<std::string> addresses;
  if (v.stage > 0) {
    for (int k = 0; k < kServers; ++k) {
      const std::string ip = HostIp(kServerHosts[k]);
      const std::string port_file = absl::StrCat(dir, "/server", k, ".port");
      auto s = SpawnIn(
          p, kServerHosts[k],
          {p.server, "--host=" + ip, "--port=0", "--port_file=" + port_file,
           absl::StrCat("--shard_index=", k),
           absl::StrCat("--num_shards=", kServers), "--threads=1",
           "--grpc_threads=8", "--insecure"},
          {}, absl::StrCat(dir, "/server", k, ".log"));
      if (!s.ok()) return s.status();
      servers.push_back(std::move(*s));
      const std::string port = WaitForLine(port_file);
      if (port.empty()) {
        return absl::DeadlineExceededError(
            absl::StrCat("server ", k, " on ", kServerHosts[k],
                         " wrote no port (log ", dir, "/server", k, ".log)"));
      }
      addresses.push_back(ip + ":" + port);
    }
  }
  std::vector<std::string> flags =
      engine::TrainWorkerFlags(Spec(p, v, steps), dir + "/ds_config.json");
  flags.push_back("--metrics_file=" + dir + "/metrics-%r.jsonl");
  // One eval, at the end: the default (about 20 per run) would put one
  // between every two steps of a short run, on rank 0's clock.
  flags.push_back("--eval_every=-1");
  if (!addresses.empty()) {
    flags.push_back("--servers=" + absl::StrJoin(addresses, ","));
  }
  std::vector<Subprocess> workers;
  auto spawn = [&](int r, const std::string& coord) -> absl::Status {
    std::vector<std::string> argv = {p.worker};
    for (const std::string& f : flags) argv.push_back(f);
    if (r == 0) argv.push_back("--port_file=" + dir + "/rank0.port");
    auto w = SpawnIn(p, kNodeHosts[r / kLocal], argv,
                     {absl::StrCat("ZEROSHARD_RANK=", r),
                      absl::StrCat("ZEROSHARD_WORLD_SIZE=", kWorld),
                      absl::StrCat("ZEROSHARD_LOCAL_RANK=", r % kLocal),
                      absl::StrCat("ZEROSHARD_LOCAL_SIZE=", kLocal),
                      "ZEROSHARD_COORD=" + coord},
                     absl::StrCat(dir, "/rank", r, ".log"));
    if (!w.ok()) return w.status();
    workers.push_back(std::move(*w));
    return absl::OkStatus();
  };
  const std::string node0 = HostIp(kNodeHosts[0]);
  if (absl::Status s = spawn(0, node0 + ":0"); !s.ok()) return s;
  const std::string port = WaitForLine(dir + "/rank0.port");
  if (port.empty()) {
    return absl::DeadlineExceededError(
        absl::StrCat("rank 0 wrote no port (log ", dir, "/rank0.log)"));
  }
  for (int r = 1; r < kWorld; ++r) {
    if (absl::Status s = spawn(r, node0 + ":" + port); !s.ok()) return s;
  }
  for (size_t r = 0; r < workers.size(); ++r) {
    auto status = workers[r].Wait(std::chrono::seconds(300));
    if (!status.ok() || *status != 0) {
      return absl::InternalError(absl::StrCat(v.name, ": rank ", r,
                                              " failed or hangs (log ", dir,
                                              "/rank", r, ".log)"));
    }
  }
  for (Subprocess& s : servers) s.Stop(std::chrono::seconds(5));
  // Rank 0's step periods and phases (metrics file), the first step left
  // out (a warm-up).
  std::vector<double> times;
  std::vector<double> phases[kPhases];
  std::vector<std::string> losses;
  {
    std::ifstream in(dir + "/metrics-0.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      if (line.find("\"event\":\"step\"") == std::string::npos) continue;
      const size_t at = line.find("\"loss\":");
      losses.push_back(line.substr(at, line.find(',', at) - at));
      if (losses.size() == 1) continue;
      const double period = JsonValue(line, "period_seconds");
      times.push_back(period);
      for (int i = 0; i + 1 < kPhases; ++i) {
        phases[i].push_back(JsonValue(line, kPhaseKeys[i]));
      }
      phases[kPhases - 1].push_back(period - JsonValue(line, "step_seconds"));
    }
  }
  if (times.empty()) {
    return absl::InternalError(absl::StrCat(v.name, ": rank 0 recorded ",
                                            losses.size(), " steps (", dir,
                                            "/metrics-0.jsonl)"));
  }
  for (int i = 0; i < kPhases; ++i) {
    rec->phases[i].push_back(bench::Median(phases[i]));
  }
  std::vector<std::string>* ref = v.delayed_from > 0 ? own : losses0;
  if (ref->empty()) *ref = losses;
  ++rec->runs;
  bool same = losses == *ref;
  if (v.delayed_from > 0 && !losses0->empty()) {  // before the delay
    const size_t k = std::min(
        {static_cast<size_t>(v.delayed_from), losses.size(), losses0->size()});
    same = same &&
           std::equal(losses.begin(), losses.begin() + k, losses0->begin());
  }
  if (same) ++rec->same;
  return bench::Median(times);
}

int Main(int argc, char** argv) {
  Paths p;
  int64_t rounds = 3, steps = 12;
  FlagSet flags("zero_hosts_bench_run",
                "zero_hosts_bench_run [flags]\n\nOne link profile of "
                "zero_hosts_bench.sh, inside `netlab.sh run`.");
  flags.String("worker", &p.worker, "zeroshard-worker binary");
  flags.String("server", &p.server, "zeroshard-server binary");
  flags.String("netlab", &p.netlab, "tools/netlab.sh");
  flags.String("dir", &p.dir, "work directory (logs, metrics)");
  flags.String("profile", &p.profile, "the link profile's name (printed)");
  flags.Int64("rounds", &rounds, "runs of every variant, alternated");
  flags.Int64("steps", &steps, "steps per run (the first is a warm-up)");
  std::string buckets = "131072,500000000";
  flags.String("buckets", &buckets,
               "reduce_bucket_size values, elements, comma-separated: every "
               "variant runs at each, and each stage's best setting counts");
  flags.Int64("allgather_bucket", &p.allgather_bucket,
              "stages 1-2: allgather_bucket_size, elements (0: one "
              "all-gather per unit; -1: the default, 5e8)");
  flags.Int64("prefetch", &p.prefetch,
              "stage 3: parameter units gathered ahead of their use "
              "(stage3_prefetch_units; -1: DeepSpeed's default "
              "stage3_prefetch_bucket_size, every unit of this model)");
  flags.Int64("reuse_distance", &p.reuse_distance,
              "stage 3: stage3_max_reuse_distance (elements; 0: every "
              "unit gathered again for backward)");
  flags.String("only", &p.only,
               "run only these variants (comma-separated names, e.g. "
               "ddp,zero3; the first named is the reference)");
  flags.ParseOrExit(argc, argv);
  p.buckets.clear();
  bool buckets_ok = true;
  for (absl::string_view b : absl::StrSplit(buckets, ',', absl::SkipEmpty())) {
    int64_t n = 0;
    buckets_ok = buckets_ok && absl::SimpleAtoi(b, &n) && n >= 1;
    p.buckets.push_back(n);
  }
  if (p.worker.empty() || p.server.empty() || p.netlab.empty() ||
      p.dir.empty() || rounds < 1 || steps < 2 || p.reuse_distance < 0 ||
      !buckets_ok || p.buckets.empty()) {
    ExitWithError(flags.program(),
                  "--worker, --server, --netlab and --dir are required; "
                  "--rounds >= 1, --steps >= 2, --reuse_distance >= 0, "
                  "--buckets: positive integers");
  }
  for (const char* h : {"srv0", "srv1", "node0", "node1"}) {
    if (HostIp(h).empty()) {
      ExitWithError(flags.program(),
                    absl::StrCat("NETLAB_IP_", h,
                                 " is not set (run inside "
                                 "`netlab.sh run --hosts \"srv0 srv1 node0 "
                                 "node1\"`)"));
    }
  }
  auto data =
      engine::WriteTestTokens("zero_hosts_bench_tokens", 1 << 16, 512, 7);
  if (!data.ok()) ExitWithError(flags.program(), data.status().ToString());
  p.data = *data;
  const std::vector<Variant> all = {
      {"ddp", 0, false, true},
      {"ddp_no_overlap", 0, false, false},
      {"zero2", 2, false, true},
      {"zero2_no_overlap", 2, false, false},
      {"zero3", 3, false, true},
      {"zero3_no_overlap", 3, false, false},
      {"zero3_offload", 3, true, true},
      {"zero3_offload_no_overlap", 3, true, false},
      {"zero2_delayed", 2, false, true, /*delayed_from=*/2}};
  std::vector<Variant> chosen;
  const std::vector<std::string> only =
      absl::StrSplit(p.only, ',', absl::SkipEmpty());
  for (const std::string& name : only) {
    auto it = std::find_if(all.begin(), all.end(),
                           [&](const Variant& v) { return name == v.name; });
    if (it == all.end()) {
      std::vector<std::string> names;
      for (const Variant& v : all) names.push_back(v.name);
      ExitWithError(flags.program(),
                    absl::StrCat("--only: no variant '", name, "' (",
                                 absl::StrJoin(names, ", "), ")"));
    }
    chosen.push_back(*it);
  }
  if (only.empty()) chosen = all;
  // Every chosen variant at every bucket size, the first bucket's first.
  std::vector<Variant> variants;
  for (int64_t b : p.buckets) {
    for (Variant v : chosen) {
      v.base = v.name;
      v.bucket = b;
      absl::StrAppend(&v.name, BucketSuffix(p.buckets, b));
      variants.push_back(std::move(v));
    }
  }
  std::vector<Record> records(variants.size());
  // The first run's losses: the first variant's, and each delayed
  // variant's own (indexed by variant).
  std::vector<std::string> losses0;
  std::vector<std::vector<std::string>> own_losses(variants.size());
  std::vector<bench::Variant> runs;
  for (size_t i = 0; i < variants.size(); ++i) {
    const Variant* v = &variants[i];
    Record* rec = &records[i];
    std::vector<std::string>* own = &own_losses[i];
    runs.push_back(
        {v->name,
         [&p, v, rec, &losses0, own, steps](const bench::RunInfo& info) {
           return RunOnce(p, *v, static_cast<int>(steps), info.round, &losses0,
                          own, rec);
         },
         i == 0});
  }
  std::printf(
      "zero_hosts_bench profile %s: K=%d servers on srv0/srv1, W=%d as 2 "
      "nodes x 2 ranks on node0/node1; GPT-2 L=4 C=128 B=4 T=64, %lld steps "
      "per run, %lld runs of each variant alternated\n",
      p.profile.c_str(), kServers, kWorld, static_cast<long long>(steps),
      static_cast<long long>(rounds));
  std::fflush(stdout);
  auto results = bench::RunAlternating(
      runs, bench::Schedule{/*warmup_rounds=*/0, static_cast<int>(rounds)});
  if (!results.ok()) {
    std::printf("zero_hosts_bench_run: %s\n",
                results.status().ToString().c_str());
    return 1;
  }
  const bench::Results& r = *results;
  std::printf("%s", r.Table().c_str());
  std::printf("where rank 0's step time goes (ms, medians):\n%-36s", "variant");
  for (const char* n : kPhaseNames) std::printf(" %8s", n);
  std::printf(" %8s %s\n", "period", "same losses");
  bool ok = true;
  for (size_t i = 0; i < variants.size(); ++i) {
    std::printf("%-36s", variants[i].name.c_str());
    for (int k = 0; k < kPhases; ++k) {
      std::printf(" %8.2f", 1e3 * bench::Median(records[i].phases[k]));
    }
    std::printf(" %8.2f %d of %d\n", 1e3 * r.Median(variants[i].name),
                records[i].same, records[i].runs);
    ok &= records[i].same == records[i].runs;
  }
  // Each ratio with its bootstrap interval over the runs (bench.h
  // BootstrapMedians): how far the runs' own scatter can move it. A variant
  // left out (--only) has no runs: its ratios print as nan.
  auto runs_of = [&](const std::string& name) {
    for (const bench::VariantResult& v : r.variants()) {
      if (v.name == name) return v.seconds;
    }
    return std::vector<double>();
  };
  // A stage's runs of each setting that ran (overlap on and off, at each
  // bucket size).
  auto settings_run = [&](const std::string& stage) {
    std::vector<std::vector<double>> out;
    for (const Variant& v : variants) {
      if (!OfStage(v, stage)) continue;
      std::vector<double> runs = runs_of(v.name);
      if (!runs.empty()) out.push_back(std::move(runs));
    }
    return out;
  };
  // Best against best: each side's fastest setting among those run.
  auto best_vs = [&](const std::string& a, const std::string& b) {
    std::vector<std::vector<double>> samples = settings_run(a);
    const size_t na = samples.size();
    for (std::vector<double>& runs : settings_run(b)) {
      samples.push_back(std::move(runs));
    }
    if (na == 0 || na == samples.size()) {
      const double nan = std::nan("");
      return bench::Interval{nan, nan, nan};
    }
    return bench::BootstrapMedians(samples, [na](const std::vector<double>& m) {
      return *std::min_element(m.begin(), m.begin() + na) /
             *std::min_element(m.begin() + na, m.end());
    });
  };
  // Overlap on / off at one bucket size (the variants' suffix).
  auto on_vs_off = [&](const std::string& a, const std::string& suffix) {
    return bench::BootstrapMedians(
        {runs_of(a + suffix), runs_of(a + "_no_overlap" + suffix)},
        [](const std::vector<double>& m) { return m[0] / m[1]; });
  };
  std::vector<std::pair<std::string, bench::Interval>> ratios = {
      {"zero3_vs_ddp", best_vs("zero3", "ddp")},
      {"zero3_offload_vs_ddp", best_vs("zero3_offload", "ddp")},
      {"zero2_vs_ddp", best_vs("zero2", "ddp")},
      {"zero2_delayed_vs_ddp", best_vs("zero2_delayed", "ddp")}};
  double worst = std::nan("");  // fmax skips the pairs left out
  // (stage, bucket size) pairs whose overlap is slower beyond the runs'
  // scatter.
  int slower = 0;
  std::vector<std::pair<std::string, bench::Interval>> per_bucket;
  for (const char* stage : {"ddp", "zero2", "zero3", "zero3_offload"}) {
    // overlap_<stage>: its worst bucket size's on / off.
    bench::Interval stage_worst{std::nan(""), std::nan(""), std::nan("")};
    for (int64_t b : p.buckets) {
      const std::string suffix = BucketSuffix(p.buckets, b);
      const bench::Interval i = on_vs_off(stage, suffix);
      if (p.buckets.size() > 1) {
        per_bucket.push_back({absl::StrCat("overlap_", stage, suffix), i});
      }
      if (!(i.value <= stage_worst.value)) stage_worst = i;
      slower += i.low > 1 ? 1 : 0;
    }
    ratios.push_back({absl::StrCat("overlap_", stage), stage_worst});
    worst = std::fmax(worst, stage_worst.value);
  }
  std::printf(
      "ratios of medians, [95%% bootstrap interval over the runs]; "
      "overlap_<stage> is on / off:\n");
  std::string keys;
  for (const auto& [name, i] : ratios) {
    std::printf("  %-22s %6.3f  [%.3f, %.3f]\n", name.c_str(), i.value, i.low,
                i.high);
    absl::StrAppend(&keys, " ", name, "=", bench::FormatValue(i.value), " ",
                    name, "_lo=", bench::FormatValue(i.low), " ", name,
                    "_hi=", bench::FormatValue(i.high));
  }
  for (const auto& [name, i] : per_bucket) {
    std::printf("  %-32s %6.3f  [%.3f, %.3f]\n", name.c_str(), i.value, i.low,
                i.high);
  }
  // Each stage's fastest setting (the one its best-against-best used).
  for (const char* stage :
       {"ddp", "zero2", "zero3", "zero3_offload", "zero2_delayed"}) {
    std::string fastest;
    double t = 0;
    for (const Variant& v : variants) {
      if (!OfStage(v, stage)) continue;
      const double m = r.Median(v.name);
      if (fastest.empty() || m < t) fastest = v.name, t = m;
    }
    if (!fastest.empty()) {
      std::printf("  fastest %-14s %s (%.2f ms)\n", stage, fastest.c_str(),
                  1e3 * t);
    }
  }
  std::printf(
      "PROFILE %s%s overlap_vs_no_overlap_worst=%.4g "
      "overlap_slower_stages=%d correct=%d\n",
      p.profile.c_str(), keys.c_str(), worst, slower, ok ? 1 : 0);
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace zeroshard

int main(int argc, char** argv) { return zeroshard::Main(argc, argv); }
