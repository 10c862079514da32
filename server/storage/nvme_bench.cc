// NVMe-tier optimizer step against the file system's own bandwidth.
//
// In one run, alternately (common/bench/bench.h: one warm-up round, then
// --steps timed rounds; medians): (1) an NvmeTier step over --state_mib of
// optimizer state (p, m, v, serve, grads on disk) under --path; (2) fio
// doing sequential O_DIRECT reads and writes of the same byte counts at the
// same block size and queue depth, concurrently, on the same file system
// (a generated job file, JSON output); (3) the CPU work of a step alone
// (AdamW + CRC-32C over the same elements, in RAM, same thread pool). Then
//   nvme_vs_fio  = fio time / step time          (>= 0.8 wanted)
//   nvme_overlap = step time / max(fio, compute) (<= 1.2 wanted)
// plus VmRSS/VmHWM from /proc/self/status (bounded-memory check; the
// compute reference's arrays, 18 bytes x --sub_group_size, are held for
// the whole run and count in it).
// Correctness in the same run: Verify() re-reads every chunk of the final
// state against its CRC (verified=1); the step itself is checked bit for
// bit against RamTier by nvme_tier_test.
//
// Usage: nvme_bench [--path=DIR] [--state_mib=512] [--steps=3] ...
// Files are removed at the end unless --keep.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/bench/bench.h"
#include "common/crc32c.h"
#include "common/flags.h"
#include "common/metrics/process_metrics.h"
#include "common/thread_pool.h"
#include "server/storage/adamw_pass.h"
#include "server/storage/array_file.h"
#include "server/storage/nvme_tier.h"
#include "server/storage/tier_test_util.h"

namespace zeroshard {
namespace storage {
namespace {

double MiB(uint64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

// The arrays of one sub-group for the compute reference.
struct ComputeArrays {
  explicit ComputeArrays(uint64_t sg)
      : p(sg, 0.5f), g(sg, 0.1f), m(sg, 0.0f), v(sg, 0.0f), serve(sg) {}
  std::vector<float> p, g, m, v;
  std::vector<uint16_t> serve;
};

// The CPU work of one step over `layout`, one sub-group at a time in `a`:
// AdamW over every sub-group plus CRC-32C of the bytes read (16/element)
// and written (14).
void Compute(const TierLayout& layout, uint64_t sg, ComputeArrays* a,
             ThreadPool* pool) {
  const uint64_t n = layout.size;
  const std::vector<AdamWHyper> h = TwoGroupHypers(1);
  uint32_t sink = 0;
  for (uint64_t first = 0; first < n; first += sg) {
    const uint64_t count = std::min(sg, n - first);
    AdamWWindow(layout, h, first, first + count, a->p.data(), a->g.data(),
                a->m.data(), a->v.data(), a->serve.data(), pool);
    // As in the step: verify p, m, v, g read; checksum p, m, v, serve
    // written.
    const void* arrays[] = {a->p.data(), a->m.data(),    a->v.data(),
                            a->g.data(), a->p.data(),    a->m.data(),
                            a->v.data(), a->serve.data()};
    std::vector<uint32_t> crc(8);
    pool->ParallelFor(8, [&](size_t i) {
      crc[i] = Crc32c(arrays[i], count * (i == 7 ? 2 : 4));
    });
    for (uint32_t c : crc) sink ^= c;
  }
  if (sink == 0x12345678) std::printf(" ");
}

// Longest "job_runtime" (ms) in fio's JSON output, in seconds.
double FioSeconds(const std::string& json) {
  double best = -1;
  const std::string key = "\"job_runtime\"";
  for (size_t at = json.find(key); at != std::string::npos;
       at = json.find(key, at + 1)) {
    const size_t colon = json.find(':', at);
    best = std::max(best, std::atof(json.c_str() + colon + 1) / 1000.0);
  }
  return best;
}

int Main(int argc, char** argv) {
  std::string path = "/work/zs_nvme_bench";
  int64_t state_mib = 512, steps = 3, block_kib = 1024, queue_depth = 32;
  int64_t io_threads = 1, buffer_count = 4, threads = 2;
  int64_t sub_group = 1 << 21;
  bool run_fio = true, keep = false;
  double max_rss_mib = 0;
  FlagSet flags("nvme_bench",
                "NvmeTier step throughput vs fio on the same file system");
  flags.String("path", &path, "directory for the tier and fio's files");
  flags.Int64("state_mib", &state_mib,
              "optimizer state on disk (p, m, v, serve, grads: 18 B/elem)");
  flags.Int64("steps", &steps, "timed steps (after one warm-up step)");
  flags.Int64("block_kib", &block_kib, "aio block_size in KiB");
  flags.Int64("queue_depth", &queue_depth, "aio queue_depth");
  flags.Int64("io_threads", &io_threads, "aio intra_op_parallelism");
  flags.Int64("buffer_count", &buffer_count, "pipeline buffers");
  flags.Int64("sub_group_size", &sub_group, "elements per sub-group");
  flags.Int64("threads", &threads, "AdamW/CRC threads");
  flags.Bool("fio", &run_fio, "run the fio reference");
  flags.Bool("keep", &keep, "keep the files");
  flags.Double("max_rss_mib", &max_rss_mib,
               "if > 0, fail unless VmHWM stays below this");
  flags.ParseOrExit(argc, argv);

  const uint64_t n = static_cast<uint64_t>(state_mib) * (1 << 20) / 18;
  const uint64_t read_bytes = 4 * PaddedBytes(n, 4);
  const uint64_t write_bytes = 3 * PaddedBytes(n, 4) + PaddedBytes(n, 2);
  Env* env = DefaultEnv();
  if (absl::Status s = env->CreateDir(path); !s.ok()) {
    std::fprintf(stderr, "nvme_bench: %s\n", s.ToString().c_str());
    return 1;
  }
  // Two generations of p, m, v, serve + grads, and fio's two files.
  const uint64_t need = 2 * (write_bytes) + PaddedBytes(n, 4) +
                        (run_fio ? read_bytes + write_bytes : 0);
  auto free_bytes = env->FreeBytes(path);
  if (!free_bytes.ok() || *free_bytes < need + (1ull << 30)) {
    std::printf(
        "nvme_bench: %s has %.1f GiB free, needs %.1f GiB + 1 GiB "
        "margin; use a smaller --state_mib\n",
        path.c_str(), free_bytes.ok() ? *free_bytes / 1073741824.0 : 0,
        need / 1073741824.0);
    bench::ResultLine().AddInt("skipped", 1).Print();
    return 1;
  }
  if (run_fio && std::system("fio --version >/dev/null 2>&1") != 0) {
    std::printf("fio failed (is it installed?): no fio reference\n");
    run_fio = false;
  }
  ThreadPool pool(static_cast<int>(threads));
  NvmeOptions o;
  o.path = JoinPath(path, "tier");
  o.block_size = static_cast<uint64_t>(block_kib) << 10;
  o.queue_depth = static_cast<int>(queue_depth);
  o.intra_op_parallelism = static_cast<int>(io_threads);
  o.buffer_count = static_cast<int>(buffer_count);
  o.sub_group_size = static_cast<uint64_t>(sub_group);
  o.read_cache_bytes = o.block_size;
  o.pool = &pool;
  const TierLayout layout = TwoGroupLayout(n);
  std::printf(
      "nvme_bench: %llu elements (%.0f MiB of state), sub_group %lld, "
      "block %lld KiB, qd %lld, %lld I/O threads, %lld buffers, "
      "path %s; step, fio and compute alternated, medians of %lld after 1 "
      "warm-up\n",
      static_cast<unsigned long long>(n), n * 18.0 / (1 << 20),
      static_cast<long long>(sub_group), static_cast<long long>(block_kib),
      static_cast<long long>(queue_depth), static_cast<long long>(io_threads),
      static_cast<long long>(buffer_count), path.c_str(),
      static_cast<long long>(steps));
  ComputeArrays arrays(o.sub_group_size);

  std::vector<double> io_waits;
  bool direct = false, verified = false;
  absl::StatusOr<bench::Results> results;
  {
    auto tier = NvmeTier::Create(o, layout);
    if (!tier.ok()) {
      std::fprintf(stderr, "nvme_bench: %s\n",
                   tier.status().ToString().c_str());
      return 1;
    }
    NvmeTier* t = tier->get();
    // Initial p and grads, written a chunk at a time.
    const uint64_t piece = o.block_size / 4;
    std::vector<float> buf(piece);
    const bench::Clock::time_point init = bench::Clock::now();
    for (uint64_t b = 0; b < n; b += piece) {
      const uint64_t len = std::min(piece, n - b);
      for (uint64_t i = 0; i < len; ++i) buf[i] = 1e-3f * ((b + i) % 1000);
      absl::Status s = t->WriteMaster(b, buf.data(), len);
      if (s.ok()) s = t->WriteGrad(b, buf.data(), len);
      if (!s.ok()) {
        std::fprintf(stderr, "nvme_bench: %s\n", s.ToString().c_str());
        return 1;
      }
    }
    std::printf("init: %.2f s\n", bench::SecondsSince(init));
    int64_t step = 0;
    auto nvme_step = [&](const bench::RunInfo& info) -> absl::StatusOr<double> {
      const absl::Status s = t->Step(TwoGroupHypers(++step));
      if (!s.ok()) return s;
      const TierStats st = t->Stats();
      std::printf("step %lld: %.3f s, %.2f GB/s, waited for I/O %.3f s%s\n",
                  static_cast<long long>(step - 1), st.last_step_seconds,
                  st.last_step_bandwidth_bytes_per_s / 1e9,
                  st.last_step_io_wait_seconds,
                  info.warmup ? " (warm-up)" : "");
      if (!info.warmup) io_waits.push_back(st.last_step_io_wait_seconds);
      direct = st.direct_io;
      return st.last_step_seconds;
    };
    // fio with the tier's I/O mode (known from the step before it).
    auto fio = [&](const bench::RunInfo&) -> absl::StatusOr<double> {
      const std::string job = JoinPath(path, "bench.fio");
      std::ofstream(job) << "[global]\nioengine=io_uring\ndirect="
                         << (direct ? 1 : 0) << "\nbs=" << o.block_size
                         << "\niodepth=" << queue_depth
                         << "\n[read]\nrw=read\nfilename="
                         << JoinPath(path, "fio_read")
                         << "\nsize=" << read_bytes
                         << "\n[write]\nrw=write\nfilename="
                         << JoinPath(path, "fio_write")
                         << "\nsize=" << write_bytes << "\n";
      const std::string out = JoinPath(path, "fio.json");
      const std::string cmd =
          "fio --output-format=json --output=" + out + " " + job;
      if (std::system(cmd.c_str()) != 0) {
        return absl::InternalError("fio failed: " + cmd);
      }
      std::stringstream ss;
      ss << std::ifstream(out).rdbuf();
      const double seconds = FioSeconds(ss.str());
      if (seconds <= 0) return absl::InternalError("no job_runtime in " + out);
      return seconds;
    };
    std::vector<bench::Variant> variants = {{"nvme_step", nvme_step}};
    if (run_fio) variants.push_back({"fio", fio, /*reference=*/true});
    variants.push_back({"compute", bench::Timed([&] {
                          Compute(layout, o.sub_group_size, &arrays, &pool);
                        })});
    results = bench::RunAlternating(
        variants, bench::Schedule{1, static_cast<int>(steps)});
    std::printf(
        "memory: VmRSS %.1f MiB, VmHWM %.1f MiB, tier peak allocation %.1f "
        "MiB, compute reference arrays %.1f MiB\n",
        MiB(metrics::ProcStatusBytes(getpid(), "VmRSS")),
        MiB(metrics::ProcStatusBytes(getpid(), "VmHWM")),
        MiB(t->Stats().peak_bytes_allocated), MiB(18 * o.sub_group_size));
    absl::Status v = t->Verify();
    verified = v.ok();
    if (!v.ok()) std::printf("verify: %s\n", v.ToString().c_str());
  }
  const double hwm_mib = MiB(metrics::ProcStatusBytes(getpid(), "VmHWM"));
  if (!keep) {
    absl::StatusOr<std::vector<std::string>> names = env->ListDir(o.path);
    if (names.ok()) {
      for (const std::string& name : *names) {
        env->RemoveFile(JoinPath(o.path, name)).IgnoreError();
      }
    }
    rmdir(o.path.c_str());
    for (const char* f : {"fio_read", "fio_write", "fio.json", "bench.fio"}) {
      unlink(JoinPath(path, f).c_str());
    }
    rmdir(path.c_str());
  }
  if (!results.ok()) {
    std::fprintf(stderr, "nvme_bench: %s\n",
                 results.status().ToString().c_str());
    return 1;
  }
  if (!direct) {
    std::printf("note: %s refused O_DIRECT; the tier used buffered I/O\n",
                path.c_str());
  }

  std::printf("%s", results->Table().c_str());
  const double step_s = results->Median("nvme_step");
  const double fio_s = run_fio ? results->Median("fio") : -1;
  const double compute_s = results->Median("compute");
  const double bytes = static_cast<double>(read_bytes + write_bytes);
  std::printf(
      "step %.3f s (%.2f GB/s, I/O wait %.3f s) | fio same bytes "
      "%.3f s (%.2f GB/s) | compute alone %.3f s\n",
      step_s, bytes / step_s / 1e9, bench::Median(io_waits), fio_s,
      fio_s > 0 ? bytes / fio_s / 1e9 : 0, compute_s);
  const double vs_fio = fio_s > 0 ? fio_s / step_s : 0;
  const double overlap = step_s / std::max(fio_s, compute_s);
  const bool rss_ok = max_rss_mib <= 0 || hwm_mib < max_rss_mib;
  bench::ResultLine()
      .Add("nvme_vs_fio", vs_fio)
      .Add("nvme_overlap", overlap)
      .Add("step_s", step_s)
      .Add("fio_s", fio_s)
      .Add("compute_s", compute_s)
      .AddInt("state_mib", state_mib)
      .Add("vm_hwm_mib", hwm_mib)
      .AddInt("direct", direct ? 1 : 0)
      .AddInt("verified", verified ? 1 : 0)
      .Print();
  return verified && rss_ok ? 0 : 1;
}

}  // namespace
}  // namespace storage
}  // namespace zeroshard

int main(int argc, char** argv) { return zeroshard::storage::Main(argc, argv); }
