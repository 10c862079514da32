// Benchmark of the fused AdamW kernel against (a) a probe that streams the
// same arrays the same way without arithmetic (the memory bandwidth the
// access pattern can get) and (b) torch.optim.AdamW(foreach=True) on CPU at
// the same thread count.
//
//   bazel run //common/optim:adamw_bench -- [--n=16777216] [--threads=2]
//       [--iters=10] [--warmup=2] [--tile=32768] [--isa=avx512|avx2|scalar]
//       [--torch_script=PATH] [--no_torch]
//
// AdamW and probe iterations alternate (common/bench/bench.h: --warmup
// untimed rounds, then --iters timed ones) so that machine load affects
// both alike; every figure is the median iteration (min and max are printed
// too; torch: the median of its own --iters). Correctness in the same run:
// three places of the last timed AdamW iteration against the scalar path,
// bit for bit. The last line is
//   RESULT adamw_gelem_s=... probe_gelem_s=... torch_gelem_s=...
//          adamw_vs_torch=... adamw_vs_bandwidth=... correct=0|1

#if defined(__x86_64__) || defined(__i386__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#define ZS_BENCH_X86 1
#else
#define ZS_BENCH_X86 0
#endif

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "common/bench/bench.h"
#include "common/dtype.h"
#include "common/optim/adamw.h"
#include "common/thread_pool.h"

namespace zeroshard {
namespace {

struct Args {
  size_t n = 16 * 1024 * 1024;
  int threads = 2;
  int iters = 10;
  int warmup = 2;
  size_t tile = 32768;
  std::string isa;  // empty: best
  std::string torch_script;
  bool no_torch = false;
};

bool ParseArgs(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string key = arg, val;
    const size_t eq = arg.find('=');
    if (eq != std::string::npos) {
      key = arg.substr(0, eq);
      val = arg.substr(eq + 1);
    } else if (arg != "--no_torch" && i + 1 < argc) {
      val = argv[++i];
    }
    if (key == "--n") {
      a->n = std::strtoull(val.c_str(), nullptr, 10);
    } else if (key == "--threads") {
      a->threads = std::atoi(val.c_str());
    } else if (key == "--iters") {
      a->iters = std::atoi(val.c_str());
    } else if (key == "--warmup") {
      a->warmup = std::atoi(val.c_str());
    } else if (key == "--tile") {
      a->tile = std::strtoull(val.c_str(), nullptr, 10);
    } else if (key == "--isa") {
      a->isa = val;
    } else if (key == "--torch_script") {
      a->torch_script = val;
    } else if (key == "--no_torch") {
      a->no_torch = true;
    } else {
      std::fprintf(stderr, "unknown flag %s\n", arg.c_str());
      return false;
    }
  }
  if (a->n == 0 || a->threads < 1 || a->iters < 1 || a->warmup < 0) {
    std::fprintf(stderr, "bad flag values\n");
    return false;
  }
  return true;
}

template <typename T>
T* AllocArray(size_t n) {
  size_t bytes = (n * sizeof(T) + 4095) / 4096 * 4096;
  return static_cast<T*>(std::aligned_alloc(4096, bytes));
}

// Cheap deterministic pseudo-random floats in [-1, 1).
inline float Noise(uint64_t i, uint64_t salt) {
  uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ salt;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return static_cast<float>(static_cast<int64_t>(x >> 40) - (1 << 23)) *
         (1.0f / (1 << 23));
}

// ------------------------------------------------------------- the probe --
// Reads p, g, m, v and writes p, m, v and a 16-bit array exactly as the
// AdamW kernel does (same vector width, unrolling and tails), with only
// bitwise operations in between. `key` is zero at run time (the compiler
// cannot know), so the arrays keep their values.

void ProbeScalar(float* p, const float* g, float* m, float* v, uint16_t* s,
                 size_t n, uint32_t key) {
  uint32_t* pi = reinterpret_cast<uint32_t*>(p);
  const uint32_t* gi = reinterpret_cast<const uint32_t*>(g);
  uint32_t* mi = reinterpret_cast<uint32_t*>(m);
  uint32_t* vi = reinterpret_cast<uint32_t*>(v);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t pv = pi[i] ^ (gi[i] & key);
    pi[i] = pv;
    mi[i] ^= key;
    vi[i] ^= key;
    s[i] = static_cast<uint16_t>(pv >> 16);
  }
}

#if ZS_BENCH_X86

__attribute__((target("avx2,fma,f16c"))) inline
    __attribute__((always_inline)) void
    ProbeAvx2Vec(float* p, const float* g, float* m, float* v, uint16_t* s,
                 __m256i key) {
  const __m256i gv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g));
  __m256i pv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  __m256i mv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(m));
  __m256i vv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v));
  pv = _mm256_xor_si256(pv, _mm256_and_si256(gv, key));
  mv = _mm256_xor_si256(mv, key);
  vv = _mm256_xor_si256(vv, key);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), pv);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(m), mv);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(v), vv);
  const __m256i hi = _mm256_srli_epi32(pv, 16);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(s),
                   _mm_packus_epi32(_mm256_castsi256_si128(hi),
                                    _mm256_extracti128_si256(hi, 1)));
}

__attribute__((target("avx2,fma,f16c"))) void ProbeAvx2(float* p,
                                                        const float* g,
                                                        float* m, float* v,
                                                        uint16_t* s, size_t n,
                                                        uint32_t key32) {
  const __m256i key = _mm256_set1_epi32(static_cast<int>(key32));
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    ProbeAvx2Vec(p + i, g + i, m + i, v + i, s + i, key);
    ProbeAvx2Vec(p + i + 8, g + i + 8, m + i + 8, v + i + 8, s + i + 8, key);
  }
  ProbeScalar(p + i, g + i, m + i, v + i, s + i, n - i, key32);
}

#define ZS_BENCH_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))

template <bool kMasked>
ZS_BENCH_AVX512 inline __attribute__((always_inline)) void ProbeAvx512Vec(
    float* p, const float* g, float* m, float* v, uint16_t* s, __m512i key,
    __mmask16 k) {
  __m512i gv, pv, mv, vv;
  if constexpr (kMasked) {
    gv = _mm512_maskz_loadu_epi32(k, g);
    pv = _mm512_maskz_loadu_epi32(k, p);
    mv = _mm512_maskz_loadu_epi32(k, m);
    vv = _mm512_maskz_loadu_epi32(k, v);
  } else {
    gv = _mm512_loadu_si512(g);
    pv = _mm512_loadu_si512(p);
    mv = _mm512_loadu_si512(m);
    vv = _mm512_loadu_si512(v);
  }
  pv = _mm512_xor_si512(pv, _mm512_and_si512(gv, key));
  mv = _mm512_xor_si512(mv, key);
  vv = _mm512_xor_si512(vv, key);
  const __m512i hi = _mm512_srli_epi32(pv, 16);
  if constexpr (kMasked) {
    _mm512_mask_storeu_epi32(p, k, pv);
    _mm512_mask_storeu_epi32(m, k, mv);
    _mm512_mask_storeu_epi32(v, k, vv);
    _mm512_mask_cvtepi32_storeu_epi16(s, k, hi);
  } else {
    _mm512_storeu_si512(p, pv);
    _mm512_storeu_si512(m, mv);
    _mm512_storeu_si512(v, vv);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(s),
                        _mm512_cvtepi32_epi16(hi));
  }
}

ZS_BENCH_AVX512 void ProbeAvx512(float* p, const float* g, float* m, float* v,
                                 uint16_t* s, size_t n, uint32_t key32) {
  const __m512i key = _mm512_set1_epi32(static_cast<int>(key32));
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    ProbeAvx512Vec<false>(p + i, g + i, m + i, v + i, s + i, key, 0);
    ProbeAvx512Vec<false>(p + i + 16, g + i + 16, m + i + 16, v + i + 16,
                          s + i + 16, key, 0);
  }
  if (i + 16 <= n) {
    ProbeAvx512Vec<false>(p + i, g + i, m + i, v + i, s + i, key, 0);
    i += 16;
  }
  if (i < n) {
    ProbeAvx512Vec<true>(p + i, g + i, m + i, v + i, s + i, key,
                         static_cast<__mmask16>((1u << (n - i)) - 1u));
  }
}

#endif  // ZS_BENCH_X86

void Probe(SimdLevel level, float* p, const float* g, float* m, float* v,
           uint16_t* s, size_t n, uint32_t key) {
#if ZS_BENCH_X86
  if (level == SimdLevel::kAvx512) return ProbeAvx512(p, g, m, v, s, n, key);
  if (level == SimdLevel::kAvx2) return ProbeAvx2(p, g, m, v, s, n, key);
#endif
  ProbeScalar(p, g, m, v, s, n, key);
}

// ----------------------------------------------------------------- torch --

bool FileExists(const std::string& path) {
  return !path.empty() && access(path.c_str(), R_OK) == 0;
}

std::string FindTorchScript(const Args& a, const char* argv0) {
  const std::string rel = "common/optim/adamw_torch_bench.py";
  std::vector<std::string> candidates;
  if (!a.torch_script.empty()) candidates.push_back(a.torch_script);
  candidates.push_back(rel);  // cwd = runfiles workspace root (bazel run)
  if (const char* d = std::getenv("RUNFILES_DIR")) {
    candidates.push_back(std::string(d) + "/zeroshard/" + rel);
  }
  candidates.push_back(std::string(argv0) + ".runfiles/zeroshard/" + rel);
  if (const char* d = std::getenv("BUILD_WORKSPACE_DIRECTORY")) {
    candidates.push_back(std::string(d) + "/" + rel);
  }
  for (const std::string& c : candidates) {
    if (FileExists(c)) return c;
  }
  return "";
}

// Returns the median elements/s reported by the torch script (its best in
// *best), 0 on failure.
double RunTorch(const Args& a, const char* argv0, double* best) {
  *best = 0;
  const std::string script = FindTorchScript(a, argv0);
  if (script.empty()) {
    std::printf(
        "torch: adamw_torch_bench.py not found (pass --torch_script)\n");
    return 0;
  }
  if (access("/usr/bin/python3", X_OK) != 0) {
    std::printf(
        "torch: /usr/bin/python3 missing (install Debian packages python3 and "
        "python3-torch)\n");
    return 0;
  }
  char cmd[4096];
  std::snprintf(cmd, sizeof(cmd),
                "/usr/bin/python3 '%s' --n=%zu --threads=%d --iters=%d "
                "--warmup=%d 2>&1",
                script.c_str(), a.n, a.threads, a.iters, a.warmup);
  FILE* f = popen(cmd, "r");
  if (f == nullptr) {
    std::printf("torch: popen failed\n");
    return 0;
  }
  double median = 0;
  char line[4096];
  std::string all;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    all += line;
    double b, m;
    if (std::sscanf(line, "TORCH best_elem_s=%lf median_elem_s=%lf", &b, &m) ==
        2) {
      *best = b;
      median = m;
      std::printf("torch: %s", line);
    }
  }
  const int rc = pclose(f);
  if (median == 0 || rc != 0) {
    std::printf("torch: script failed (rc=%d); output:\n%s\n", rc, all.c_str());
    if (all.find("No module named 'torch'") != std::string::npos) {
      std::printf("torch: install Debian package python3-torch\n");
    }
    return 0;
  }
  return median;
}

int Main(int argc, char** argv) {
  Args args;
  if (!ParseArgs(argc, argv, &args)) return 2;
  SimdLevel isa = DetectSimdLevel();
  if (args.isa == "scalar") isa = SimdLevel::kScalar;
  if (args.isa == "avx2") isa = SimdLevel::kAvx2;
  if (args.isa == "avx512") isa = SimdLevel::kAvx512;
  if (static_cast<int>(isa) > static_cast<int>(DetectSimdLevel())) {
    std::fprintf(stderr, "ISA %s not supported here\n", SimdLevelName(isa));
    return 2;
  }
  const size_t n = args.n;
  std::printf(
      "adamw_bench: n=%zu threads=%d iters=%d (+%d warm-up) tile=%zu isa=%s "
      "(best %s) serving=bf16, %zu MiB of arrays\n",
      n, args.threads, args.iters, args.warmup, args.tile, SimdLevelName(isa),
      SimdLevelName(DetectSimdLevel()), (n * 18) >> 20);

  // One pool for the first touch, the kernel and the probe. Work item i is
  // the tile [i * tile, min(n, (i + 1) * tile)); tiles are a multiple of 64
  // elements (--tile=0: one tile per thread), so they start on cache lines.
  ThreadPool pool(args.threads);
  size_t tile = args.tile;
  if (tile == 0) tile = (n + args.threads - 1) / args.threads;
  tile = (tile + 63) / 64 * 64;
  const size_t num_tiles = (n + tile - 1) / tile;
  using TileFn = std::function<void(size_t begin, size_t end)>;
  auto run_tiles = [&](const TileFn& fn) {
    pool.ParallelFor(num_tiles, [&](size_t i) {
      const size_t b = i * tile;
      fn(b, std::min(n, b + tile));
    });
  };
  float* p = AllocArray<float>(n);
  float* g = AllocArray<float>(n);
  float* m = AllocArray<float>(n);
  float* v = AllocArray<float>(n);
  uint16_t* s = AllocArray<uint16_t>(n);
  // First touch by the threads that will work on the pages.
  run_tiles([&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) {
      p[i] = 0.02f * Noise(i, 1);
      g[i] = 1e-3f * Noise(i, 2);
      m[i] = 0;
      v[i] = 0;
      s[i] = 0;
    }
  });

  AdamWHyper h;
  h.lr = 1e-3f;
  h.beta1 = 0.9f;
  h.beta2 = 0.999f;
  h.eps = 1e-8f;
  h.weight_decay = 0.1f;
  h.grad_scale = 1.0f;
  h.step = 0;

  auto adamw = [&](size_t b, size_t e) {
    AdamWStepAt(isa, h, p + b, g + b, m + b, v + b, s + b, ServingType::kBf16,
                e - b);
  };
  static volatile uint32_t zero_key = 0;
  const uint32_t key = zero_key;
  auto probe = [&](size_t b, size_t e) {
    Probe(isa, p + b, g + b, m + b, v + b, s + b, e - b, key);
  };
  auto time_run = [&](const TileFn& fn) {
    const bench::Clock::time_point t0 = bench::Clock::now();
    run_tiles(fn);
    return bench::SecondsSince(t0);
  };

  // Saved inputs of the last AdamW iteration, to check it against the scalar
  // path.
  const size_t kCheck = std::min<size_t>(n, 4096);
  const size_t check_at[3] = {0, (n - kCheck) / 2 / 64 * 64, n - kCheck};
  std::vector<float> saved_p(3 * kCheck), saved_m(3 * kCheck),
      saved_v(3 * kCheck);

  const double gelem = static_cast<double>(n) * 1e-9;
  auto results = bench::RunAlternating(
      {{"probe",
        [&](const bench::RunInfo&) -> absl::StatusOr<double> {
          return time_run(probe);
        },
        /*reference=*/true, gelem},
       {"adamw",
        [&](const bench::RunInfo& info) -> absl::StatusOr<double> {
          if (info.last) {
            for (int c = 0; c < 3; ++c) {
              std::memcpy(&saved_p[c * kCheck], p + check_at[c], kCheck * 4);
              std::memcpy(&saved_m[c * kCheck], m + check_at[c], kCheck * 4);
              std::memcpy(&saved_v[c * kCheck], v + check_at[c], kCheck * 4);
            }
          }
          ++h.step;
          return time_run(adamw);
        },
        /*reference=*/false, gelem}},
      bench::Schedule{args.warmup, args.iters});
  if (!results.ok()) {
    std::fprintf(stderr, "%s\n", results.status().ToString().c_str());
    return 1;
  }
  std::printf("%s", results->Table("Gelem/s").c_str());

  // Correctness: the timed multithreaded run vs the scalar reference.
  size_t mismatches = 0;
  std::vector<uint16_t> ref_s(kCheck);
  for (int c = 0; c < 3; ++c) {
    float* rp = &saved_p[c * kCheck];
    float* rm = &saved_m[c * kCheck];
    float* rv = &saved_v[c * kCheck];
    AdamWStepAt(SimdLevel::kScalar, h, rp, g + check_at[c], rm, rv,
                ref_s.data(), ServingType::kBf16, kCheck);
    const size_t o = check_at[c];
    for (size_t i = 0; i < kCheck; ++i) {
      mismatches += std::memcmp(&rp[i], &p[o + i], 4) != 0 ||
                    std::memcmp(&rm[i], &m[o + i], 4) != 0 ||
                    std::memcmp(&rv[i], &v[o + i], 4) != 0 ||
                    ref_s[i] != s[o + i];
    }
  }
  std::printf(
      "check: %zu elements of the last timed run (3 places) vs the scalar "
      "path: %s (%zu differ)\n",
      3 * kCheck, mismatches == 0 ? "bit-identical" : "MISMATCH", mismatches);

  const double adamw_rate = results->Get("adamw").rate() * 1e9;
  const double probe_rate = results->Get("probe").rate() * 1e9;
  constexpr double kBytes = 30;  // read p, g, m, v; write p, m, v, bf16
  std::printf("adamw (fused, %s, bf16 copy): median %.3f Gelem/s = %.1f GB/s\n",
              SimdLevelName(isa), adamw_rate * 1e-9,
              adamw_rate * kBytes * 1e-9);
  std::printf(
      "probe (same streams, no math): median %.3f Gelem/s = %.1f GB/s\n",
      probe_rate * 1e-9, probe_rate * kBytes * 1e-9);

  double torch_best = 0;
  const double torch_rate =
      args.no_torch ? 0 : RunTorch(args, argv[0], &torch_best);
  std::printf(
      "torch.optim.AdamW(foreach=True), %d threads: median %.3f Gelem/s, "
      "best %.3f Gelem/s\n",
      args.threads, torch_rate * 1e-9, torch_best * 1e-9);

  const double vs_bw = results->SpeedVsReference("adamw");
  const double vs_torch = bench::Ratio(adamw_rate, torch_rate);
  std::printf("adamw / probe bandwidth = %.3f (target >= 0.85)%s\n", vs_bw,
              vs_bw >= 0.85 ? "" : "  BELOW TARGET");
  std::printf("adamw / torch           = %.2f (target >= 5)%s\n", vs_torch,
              vs_torch >= 5 ? "" : "  BELOW TARGET");
  bench::ResultLine()
      .Add("adamw_gelem_s", adamw_rate * 1e-9)
      .Add("probe_gelem_s", probe_rate * 1e-9)
      .Add("torch_gelem_s", torch_rate * 1e-9)
      .Add("adamw_vs_torch", vs_torch)
      .Add("adamw_vs_bandwidth", vs_bw)
      .AddInt("correct", mismatches == 0 ? 1 : 0)
      .Print();
  std::free(p);
  std::free(g);
  std::free(m);
  std::free(v);
  std::free(s);
  return mismatches == 0 ? 0 : 1;
}

}  // namespace
}  // namespace zeroshard

int main(int argc, char** argv) { return zeroshard::Main(argc, argv); }
