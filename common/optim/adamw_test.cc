#include "common/optim/adamw.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/dtype.h"
#include "common/thread_pool.h"
#include "gtest/gtest.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ZS_TEST_X86 1
#else
#define ZS_TEST_X86 0
#endif

namespace zeroshard {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

const char* StName(ServingType st) {
  switch (st) {
    case ServingType::kNone:
      return "none";
    case ServingType::kBf16:
      return "bf16";
    case ServingType::kFp16:
      return "fp16";
  }
  return "?";
}

// Whether AdamWStepAt() can run `level` on this CPU.
bool LevelSupported(SimdLevel level) {
  return static_cast<int>(level) <= static_cast<int>(DetectSimdLevel());
}

std::vector<SimdLevel> SimdLevels() {
  std::vector<SimdLevel> out;
  for (SimdLevel level : {SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    if (LevelSupported(level)) out.push_back(level);
  }
  return out;
}

AdamWHyper DefaultHyper() {
  AdamWHyper h;
  h.lr = 1e-3f;
  h.beta1 = 0.9f;
  h.beta2 = 0.999f;
  h.eps = 1e-8f;
  h.weight_decay = 0.1f;
  h.grad_scale = 1.0f;
  h.step = 1;
  return h;
}

// ------------------------------------------------------------ conversions --

#if ZS_TEST_X86
// Converts n (a multiple of 8) floats with F16C, round to nearest.
__attribute__((target("avx,f16c"))) void HardwareFp16(const float* in,
                                                      uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; i += 8) {
    _mm_storeu_si128(
        reinterpret_cast<__m128i*>(out + i),
        _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
  }
}
#endif

// The scalar fp16 conversion Fp32ToFp16 (used by the scalar path and the
// AVX2 tails) agrees with F16C vcvtps2ph (used by the SIMD paths) for every
// one of the 2^32 float bit patterns.
TEST(ConversionTest, Fp16MatchesF16cExhaustively) {
#if ZS_TEST_X86
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("f16c") || !__builtin_cpu_supports("avx")) {
    GTEST_SKIP() << "CPU without F16C";
  }
  constexpr size_t kChunk = 1 << 16;
  const int threads = static_cast<int>(
      std::min(4u, std::max(1u, std::thread::hardware_concurrency())));
  ThreadPool pool(threads);
  std::atomic<uint64_t> bad{0};
  std::atomic<uint32_t> first_bad{0};
  // Work item t covers chunks [t * kTile, (t + 1) * kTile); a chunk is kChunk
  // consecutive patterns.
  constexpr size_t kChunks = size_t{1} << 16;
  constexpr size_t kTile = 64;
  pool.ParallelFor(kChunks / kTile, [&](size_t t) {
    const size_t b = t * kTile;
    const size_t e = std::min(kChunks, b + kTile);
    std::vector<uint32_t> u(kChunk);
    std::vector<float> f(kChunk);
    std::vector<uint16_t> hw(kChunk);
    for (size_t c = b; c < e; ++c) {
      for (size_t i = 0; i < kChunk; ++i) {
        u[i] = static_cast<uint32_t>(c * kChunk + i);
      }
      std::memcpy(f.data(), u.data(), kChunk * 4);
      HardwareFp16(f.data(), hw.data(), kChunk);
      for (size_t i = 0; i < kChunk; ++i) {
        if (Fp32ToFp16(f[i]) != hw[i] && bad.fetch_add(1) == 0) {
          first_bad.store(u[i]);
        }
      }
    }
  });
  EXPECT_EQ(bad.load(), 0u)
      << "first mismatch at 0x" << std::hex << first_bad.load() << ": soft 0x"
      << Fp32ToFp16(FromBits(first_bad.load()));
#else
  GTEST_SKIP() << "not x86";
#endif
}

// --------------------------------------------------------------- kernels --

// AdamWStepAt() runs exactly the levels up to DetectSimdLevel() and rejects
// values that are not a SimdLevel.
TEST(AdamWTest, LevelSupport) {
  for (int l = -1; l <= 3; ++l) {
    const bool want = l >= 0 && l <= static_cast<int>(SimdLevel::kAvx512) &&
                      l <= static_cast<int>(DetectSimdLevel());
    EXPECT_EQ(
        AdamWStepAt(static_cast<SimdLevel>(l), DefaultHyper(), nullptr, nullptr,
                    nullptr, nullptr, nullptr, ServingType::kNone, 0),
        want)
        << l;
  }
  EXPECT_TRUE(LevelSupported(SimdLevel::kScalar));
  std::printf("best level: %s; avx2 %s, avx512 %s\n",
              SimdLevelName(DetectSimdLevel()),
              LevelSupported(SimdLevel::kAvx2) ? "yes" : "no",
              LevelSupported(SimdLevel::kAvx512) ? "yes" : "no");
}

// A value of a random class: ordinary, tiny/huge magnitudes, zeros,
// denormals, Inf, NaN (random payloads and signs).
float SpecialValue(std::mt19937_64& rng, bool allow_nonfinite) {
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  const int kind = static_cast<int>(rng() % 100);
  if (kind < 60) return uni(rng);
  if (kind < 75) {
    return std::ldexp(uni(rng), static_cast<int>(rng() % 250) - 125);
  }
  if (kind < 80) return (rng() & 1) ? 0.0f : -0.0f;
  if (kind < 85) return FromBits(static_cast<uint32_t>(rng()) & 0x807FFFFFu);
  if (kind < 88) return (rng() & 1) ? 3.4e38f : -3.4e38f;
  if (kind < 90) return std::ldexp(uni(rng), -140);
  if (!allow_nonfinite) return uni(rng);
  if (kind < 94) {
    return (rng() & 1) ? std::numeric_limits<float>::infinity()
                       : -std::numeric_limits<float>::infinity();
  }
  // NaN with a random payload (signalling or quiet) and sign.
  uint32_t payload = static_cast<uint32_t>(rng()) & 0x7FFFFFu;
  if (payload == 0) payload = 1;
  return FromBits((static_cast<uint32_t>(rng()) & 0x80000000u) | 0x7F800000u |
                  payload);
}

// Buffers with guard zones, at element offset `off` from a 64-byte boundary.
template <typename T>
struct Guarded {
  static constexpr size_t kGuard = 32;
  std::vector<T> storage;
  size_t off;
  size_t n;
  Guarded(size_t n_, size_t off_, T fill) : off(off_), n(n_) {
    storage.assign(n + off + 2 * kGuard + 64 / sizeof(T), fill);
  }
  T* data() {
    // Align the start of the logical array to 64 bytes, plus `off` elements.
    uintptr_t a = reinterpret_cast<uintptr_t>(storage.data() + kGuard);
    uintptr_t aligned = (a + 63) & ~uintptr_t{63};
    return reinterpret_cast<T*>(aligned) + off;
  }
  // Whether everything outside [data(), data() + n) still holds `fill`.
  bool GuardsIntact(T fill) {
    T* begin = data();
    T* end = begin + n;
    for (T* q = storage.data(); q < storage.data() + storage.size(); ++q) {
      if ((q < begin || q >= end) && std::memcmp(q, &fill, sizeof(T)) != 0) {
        return false;
      }
    }
    return true;
  }
};

struct State {
  std::vector<float> p, g, m, v;
};

State RandomState(size_t n, uint64_t seed, bool specials) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  State s;
  s.p.resize(n);
  s.g.resize(n);
  s.m.resize(n);
  s.v.resize(n);
  for (size_t i = 0; i < n; ++i) {
    if (specials) {
      s.p[i] = SpecialValue(rng, true);
      s.g[i] = SpecialValue(rng, true);
      s.m[i] = SpecialValue(rng, true);
      // Mostly non-negative second moments, some negative ones (sqrt -> NaN).
      const float v = SpecialValue(rng, true);
      s.v[i] = (rng() % 16 == 0) ? v : std::fabs(v);
    } else {
      s.p[i] = normal(rng);
      s.g[i] = 0.1f * normal(rng);
      s.m[i] = 0.01f * normal(rng);
      s.v[i] = 1e-4f * std::fabs(normal(rng));
    }
  }
  return s;
}

struct Result {
  std::vector<uint32_t> p, m, v;
  std::vector<uint16_t> s;
  bool guards_ok = true;
  bool g_unchanged = true;
  bool ran = false;
};

constexpr float kFill = -12345.5f;
constexpr uint16_t kFill16 = 0xABCD;

// Runs one step on copies of `st`, placed at the given element offsets.
Result RunOnce(SimdLevel level, const AdamWHyper& h, const State& st,
               ServingType sty, const size_t offs[5]) {
  const size_t n = st.p.size();
  Guarded<float> p(n, offs[0], kFill), g(n, offs[1], kFill),
      m(n, offs[2], kFill), v(n, offs[3], kFill);
  Guarded<uint16_t> s(n, offs[4], kFill16);
  if (n) {
    std::memcpy(p.data(), st.p.data(), n * 4);
    std::memcpy(g.data(), st.g.data(), n * 4);
    std::memcpy(m.data(), st.m.data(), n * 4);
    std::memcpy(v.data(), st.v.data(), n * 4);
  }
  Result r;
  r.ran = AdamWStepAt(level, h, p.data(), g.data(), m.data(), v.data(),
                      sty == ServingType::kNone ? nullptr : s.data(), sty, n);
  r.p.resize(n);
  r.m.resize(n);
  r.v.resize(n);
  r.s.resize(n);
  if (n) {
    std::memcpy(r.p.data(), p.data(), n * 4);
    std::memcpy(r.m.data(), m.data(), n * 4);
    std::memcpy(r.v.data(), v.data(), n * 4);
    std::memcpy(r.s.data(), s.data(), n * 2);
    r.g_unchanged = std::memcmp(g.data(), st.g.data(), n * 4) == 0;
  }
  r.guards_ok = p.GuardsIntact(kFill) && g.GuardsIntact(kFill) &&
                m.GuardsIntact(kFill) && v.GuardsIntact(kFill) &&
                s.GuardsIntact(kFill16);
  return r;
}

std::vector<AdamWHyper> HyperVariants() {
  std::vector<AdamWHyper> hs;
  hs.push_back(DefaultHyper());
  AdamWHyper h = DefaultHyper();
  h.lr = 3e-2f;
  h.weight_decay = 0.0f;
  h.grad_scale = 0.37f;
  h.step = 7;
  hs.push_back(h);
  h = DefaultHyper();
  h.eps = 0.0f;  // 0/0 -> NaN where m = v = 0
  h.step = 1000000;
  h.beta1 = 0.0f;
  hs.push_back(h);
  h = DefaultHyper();
  h.lr = 0.0f;
  h.beta2 = 0.0f;
  h.grad_scale = 1.0f / 65536;
  h.weight_decay = 1e4f;
  h.step = 3;
  hs.push_back(h);
  // DeepSpeed's Adam with bias_correction false, at a step where the
  // terms it drops are far from 1.
  h = DefaultHyper();
  h.bias_correction = false;
  h.step = 2;
  hs.push_back(h);
  return hs;
}

TEST(AdamWTest, WithoutBiasCorrectionTheStepIsLrTimesMOverDen) {
  AdamWHyper h = DefaultHyper();
  h.step = 3;
  const AdamWScalars with = MakeAdamWScalars(h);
  h.bias_correction = false;
  const AdamWScalars without = MakeAdamWScalars(h);
  EXPECT_EQ(without.bc2_sqrt, 1.0f);
  EXPECT_EQ(without.neg_step_size, -1e-3f);
  EXPECT_NE(with.bc2_sqrt, 1.0f);
  EXPECT_NE(with.neg_step_size, without.neg_step_size);
  EXPECT_EQ(with.decay, without.decay);  // the decoupled decay is the same
}

TEST(AdamWTest, SimdMatchesScalarBitwise) {
  const std::vector<SimdLevel> levels = SimdLevels();
  if (levels.empty()) GTEST_SKIP() << "no SIMD path on this CPU";
  const size_t lengths[] = {0,  1,  7,  8,  9,  15,  16,   17,  31,
                            32, 33, 63, 64, 65, 100, 1000, 4097};
  const size_t offsets[][5] = {
      {0, 0, 0, 0, 0}, {1, 3, 2, 5, 1}, {3, 1, 7, 2, 3}, {5, 5, 5, 5, 6}};
  const std::vector<AdamWHyper> hypers = HyperVariants();
  int runs = 0;
  for (size_t n : lengths) {
    for (int special = 0; special < 2; ++special) {
      const State st = RandomState(n, 1000 + n * 2 + special, special);
      for (size_t hi = 0; hi < hypers.size(); ++hi) {
        for (ServingType sty :
             {ServingType::kNone, ServingType::kBf16, ServingType::kFp16}) {
          for (const auto& offs : offsets) {
            const Result ref =
                RunOnce(SimdLevel::kScalar, hypers[hi], st, sty, offs);
            ASSERT_TRUE(ref.ran);
            ASSERT_TRUE(ref.guards_ok) << "scalar wrote out of bounds";
            ASSERT_TRUE(ref.g_unchanged);
            for (SimdLevel level : levels) {
              const Result r = RunOnce(level, hypers[hi], st, sty, offs);
              ++runs;
              const std::string where = std::string(SimdLevelName(level)) +
                                        " n=" + std::to_string(n) +
                                        " serve=" + StName(sty) +
                                        " hyper=" + std::to_string(hi) +
                                        " special=" + std::to_string(special) +
                                        " off=" + std::to_string(offs[0]) +
                                        "," + std::to_string(offs[1]);
              ASSERT_TRUE(r.ran) << where;
              ASSERT_TRUE(r.guards_ok) << "out-of-bounds write, " << where;
              ASSERT_TRUE(r.g_unchanged) << where;
              for (size_t i = 0; i < n; ++i) {
                ASSERT_EQ(r.p[i], ref.p[i]) << "p[" << i << "] " << where;
                ASSERT_EQ(r.m[i], ref.m[i]) << "m[" << i << "] " << where;
                ASSERT_EQ(r.v[i], ref.v[i]) << "v[" << i << "] " << where;
                if (sty != ServingType::kNone) {
                  ASSERT_EQ(r.s[i], ref.s[i]) << "serve[" << i << "] " << where;
                }
              }
            }
          }
        }
      }
    }
  }
  std::printf("%d SIMD runs bit-identical to scalar\n", runs);
}

// Many steps in lockstep: the paths stay bit-identical as state evolves.
TEST(AdamWTest, SimdMatchesScalarOverManySteps) {
  const std::vector<SimdLevel> levels = SimdLevels();
  if (levels.empty()) GTEST_SKIP() << "no SIMD path on this CPU";
  const size_t n = 4097;
  State ref = RandomState(n, 42, false);
  std::vector<State> sts(levels.size(), ref);
  std::vector<uint16_t> sref(n), s(n);
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  AdamWHyper h = DefaultHyper();
  for (int t = 1; t <= 200; ++t) {
    h.step = t;
    h.lr = 1e-3f * (1.0f + 0.5f * std::sin(0.1f * t));
    for (size_t i = 0; i < n; ++i) ref.g[i] = 0.1f * normal(rng);
    const ServingType sty = t % 2 ? ServingType::kBf16 : ServingType::kFp16;
    ASSERT_TRUE(AdamWStepAt(SimdLevel::kScalar, h, ref.p.data(), ref.g.data(),
                            ref.m.data(), ref.v.data(), sref.data(), sty, n));
    for (size_t k = 0; k < levels.size(); ++k) {
      State& st = sts[k];
      st.g = ref.g;
      ASSERT_TRUE(AdamWStepAt(levels[k], h, st.p.data(), st.g.data(),
                              st.m.data(), st.v.data(), s.data(), sty, n));
      ASSERT_EQ(0, std::memcmp(st.p.data(), ref.p.data(), n * 4)) << t;
      ASSERT_EQ(0, std::memcmp(st.m.data(), ref.m.data(), n * 4)) << t;
      ASSERT_EQ(0, std::memcmp(st.v.data(), ref.v.data(), n * 4)) << t;
      ASSERT_EQ(0, std::memcmp(s.data(), sref.data(), n * 2)) << t;
    }
  }
}

TEST(AdamWTest, NanAndInfGradientsGiveCanonicalNan) {
  const float inf = std::numeric_limits<float>::infinity();
  const float grads[] = {FromBits(0x7FC00000), FromBits(0xFF812345),
                         FromBits(0x7F800001), inf, -inf};
  std::vector<SimdLevel> levels = SimdLevels();
  levels.push_back(SimdLevel::kScalar);
  for (SimdLevel level : levels) {
    for (float gv : grads) {
      // Several elements so that the SIMD body (not only tails) is used.
      const size_t n = 37;
      std::vector<float> p(n, 0.5f), g(n, gv), m(n, 0.01f), v(n, 1e-4f);
      std::vector<uint16_t> b(n), f(n);
      AdamWHyper h = DefaultHyper();
      ASSERT_TRUE(AdamWStepAt(level, h, p.data(), g.data(), m.data(), v.data(),
                              b.data(), ServingType::kBf16, n));
      for (size_t i = 0; i < n; ++i) {
        EXPECT_EQ(Bits(p[i]), 0x7FC00000u)
            << SimdLevelName(level) << " g=" << gv;
        EXPECT_EQ(b[i], 0x7FC0) << SimdLevelName(level);
        if (std::isnan(gv)) {
          EXPECT_EQ(Bits(m[i]), 0x7FC00000u);
          EXPECT_EQ(Bits(v[i]), 0x7FC00000u);
        } else {
          EXPECT_EQ(m[i], gv);  // (1 - beta1) * +-Inf
          EXPECT_EQ(v[i], inf);
        }
      }
      // Next step with a finite gradient: NaN state stays NaN.
      std::fill(g.begin(), g.end(), 0.1f);
      h.step = 2;
      ASSERT_TRUE(AdamWStepAt(level, h, p.data(), g.data(), m.data(), v.data(),
                              f.data(), ServingType::kFp16, n));
      for (size_t i = 0; i < n; ++i) {
        EXPECT_EQ(Bits(p[i]), 0x7FC00000u);
        EXPECT_EQ(f[i], 0x7E00);
      }
    }
  }
}

// Independent check of the math against a double-precision evaluation of
// the AdamW formula (loose tolerance: different rounding).
TEST(AdamWTest, MatchesDoublePrecisionFormula) {
  const size_t n = 1000;
  State st = RandomState(n, 9, false);
  std::vector<SimdLevel> levels = SimdLevels();
  levels.push_back(SimdLevel::kScalar);
  for (SimdLevel level : levels) {
    for (const AdamWHyper& h : HyperVariants()) {
      if (h.eps == 0.0f) continue;
      State s = st;
      ASSERT_TRUE(AdamWStepAt(level, h, s.p.data(), s.g.data(), s.m.data(),
                              s.v.data(), nullptr, ServingType::kNone, n));
      // DeepSpeed's cpu_adam.h: bias_correction false makes both 1.
      const double bc1 =
          h.bias_correction ? 1 - std::pow(double{h.beta1}, double(h.step)) : 1;
      const double bc2 =
          h.bias_correction ? 1 - std::pow(double{h.beta2}, double(h.step)) : 1;
      for (size_t i = 0; i < n; ++i) {
        const double g = double{st.g[i]} * h.grad_scale;
        const double pd = st.p[i] * (1 - double{h.lr} * h.weight_decay);
        const double m1 = h.beta1 * double{st.m[i]};
        const double m2 = (1 - double{h.beta1}) * g;
        const double m = m1 + m2;
        const double v =
            h.beta2 * double{st.v[i]} + (1 - double{h.beta2}) * g * g;
        const double den = std::sqrt(v) / std::sqrt(bc2) + h.eps;
        const double upd = h.lr / bc1 * m / den;
        const double p = pd - upd;
        // Tolerances scale with the terms (cancellation is allowed).
        EXPECT_NEAR(s.m[i], m, 1e-6 * (std::fabs(m1) + std::fabs(m2)) + 1e-37);
        EXPECT_NEAR(s.v[i], v, 1e-6 * std::fabs(v) + 1e-37);
        EXPECT_NEAR(s.p[i], p, 1e-6 * (std::fabs(pd) + std::fabs(upd)) + 1e-37);
      }
    }
  }
}

TEST(AdamWTest, DispatchAndServingCopy) {
  const size_t n = 1001;
  const State st = RandomState(n, 11, true);
  const size_t offs[5] = {0, 0, 0, 0, 0};
  for (ServingType sty : {ServingType::kBf16, ServingType::kFp16}) {
    const Result best =
        RunOnce(DetectSimdLevel(), DefaultHyper(), st, sty, offs);
    State s = st;
    std::vector<uint16_t> serve(n);
    AdamWStep(DefaultHyper(), s.p.data(), s.g.data(), s.m.data(), s.v.data(),
              serve.data(), sty, n);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(Bits(s.p[i]), best.p[i]);
      ASSERT_EQ(serve[i], best.s[i]);
      const uint16_t want =
          sty == ServingType::kBf16 ? Fp32ToBf16(s.p[i]) : Fp32ToFp16(s.p[i]);
      ASSERT_EQ(serve[i], want) << i;
    }
  }
  // Empty ranges and null pointers.
  AdamWStep(DefaultHyper(), nullptr, nullptr, nullptr, nullptr, nullptr,
            ServingType::kBf16, 0);
  for (SimdLevel level :
       {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    EXPECT_EQ(AdamWStepAt(level, DefaultHyper(), nullptr, nullptr, nullptr,
                          nullptr, nullptr, ServingType::kNone, 0),
              LevelSupported(level));
  }
}

// Splitting a range into tiles (any boundaries) gives the same bits as one
// call, so results do not depend on the thread count.
TEST(AdamWTest, TiledEqualsWhole) {
  const size_t n = 100003;
  const State st = RandomState(n, 3, false);
  State whole = st;
  std::vector<uint16_t> sw(n), st2(n);
  AdamWStep(DefaultHyper(), whole.p.data(), whole.g.data(), whole.m.data(),
            whole.v.data(), sw.data(), ServingType::kBf16, n);
  for (int threads : {1, 2, 3}) {
    // 0: one tile per thread, rounded up to a multiple of 64 elements.
    for (size_t tile : {size_t{64}, size_t{1000}, size_t{1024}, size_t{0}}) {
      if (tile == 0) tile = ((n + threads - 1) / threads + 63) / 64 * 64;
      State t = st;
      ThreadPool pool(threads);
      pool.ParallelFor((n + tile - 1) / tile, [&](size_t i) {
        const size_t b = i * tile;
        const size_t e = std::min(n, b + tile);
        AdamWStep(DefaultHyper(), t.p.data() + b, t.g.data() + b,
                  t.m.data() + b, t.v.data() + b, st2.data() + b,
                  ServingType::kBf16, e - b);
      });
      ASSERT_EQ(0, std::memcmp(t.p.data(), whole.p.data(), n * 4));
      ASSERT_EQ(0, std::memcmp(t.m.data(), whole.m.data(), n * 4));
      ASSERT_EQ(0, std::memcmp(t.v.data(), whole.v.data(), n * 4));
      ASSERT_EQ(0, std::memcmp(st2.data(), sw.data(), n * 2));
    }
  }
}

// ------------------------------------------------------- PyTorch parity --

std::string TempDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  std::string base = t != nullptr ? t : "/tmp";
  std::string templ = base + "/adamw_parity_XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) return "";
  return buf.data();
}

std::string ReferenceScript() {
  const std::string rel = "common/optim/adamw_reference.py";
  if (const char* src = std::getenv("TEST_SRCDIR")) {
    const std::string path = std::string(src) + "/zeroshard/" + rel;
    if (access(path.c_str(), R_OK) == 0) return path;
  }
  return rel;  // bazel runs tests from the runfiles workspace root
}

bool WriteFile(const std::string& path, const void* data, size_t bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  const bool ok = std::fwrite(data, 1, bytes, f) == bytes;
  return std::fclose(f) == 0 && ok;
}

bool ReadFloats(const std::string& path, size_t n, std::vector<float>* out) {
  out->assign(n, 0.0f);
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  const bool ok = std::fread(out->data(), 4, n, f) == n;
  std::fclose(f);
  return ok;
}

// Runs `cmd`, returns its exit status and its output in *out.
int RunCommand(const std::string& cmd, std::string* out) {
  out->clear();
  FILE* f = popen((cmd + " 2>&1").c_str(), "r");
  if (f == nullptr) return -1;
  char buf[4096];
  size_t k;
  while ((k = std::fread(buf, 1, sizeof(buf), f)) > 0) out->append(buf, k);
  return pclose(f);
}

// Two parameter groups (different lr schedules, weight decay 0.1 / 0.0,
// grad_scale 1 / 0.37), 100 steps with bias correction, against
// torch.optim.AdamW from Debian's python3-torch.
//
// Error metric, per array (p, m, v) and element:
//   rel = |ours - torch| / max(|torch|, 1e-6 * max_j |torch_j|)
// i.e. relative error with a floor at a millionth of the array's largest
// magnitude (so that values crossing zero cannot blow it up). Required:
// max rel <= 1e-6 for every array.
TEST(TorchParityTest, TwoGroupsHundredSteps) {
  const char* kPython = "/usr/bin/python3";
  ASSERT_EQ(access(kPython, X_OK), 0)
      << kPython
      << " not found: this test needs Debian's python3 with torch (apt-get "
         "install python3-torch)";
  std::string out;
  ASSERT_EQ(RunCommand(std::string(kPython) + " -c 'import torch'", &out), 0)
      << "torch is not importable by " << kPython
      << " (install Debian package python3-torch):\n"
      << out;

  const std::string dir = TempDir();
  ASSERT_FALSE(dir.empty());
  constexpr int kSteps = 100;
  constexpr int kGroups = 2;
  const size_t ns[kGroups] = {4099, 777};
  const float wds[kGroups] = {0.1f, 0.0f};
  const float scales[kGroups] = {1.0f, 0.37f};
  const float base_lr[kGroups] = {1e-3f, 3e-3f};
  const float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;

  std::mt19937_64 rng(2024);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> lr(kSteps * kGroups);
  for (int t = 0; t < kSteps; ++t) {
    // Warm-up then cosine decay, different per group.
    for (int i = 0; i < kGroups; ++i) {
      const double frac =
          t < 10 ? (t + 1) / 10.0 : 0.5 * (1 + std::cos(M_PI * (t - 10) / 90));
      lr[t * kGroups + i] = static_cast<float>(base_lr[i] * (0.1 + frac));
    }
  }
  std::vector<std::vector<float>> p0(kGroups), grads(kGroups);
  for (int i = 0; i < kGroups; ++i) {
    p0[i].resize(ns[i]);
    for (float& x : p0[i]) x = normal(rng);
    grads[i].resize(kSteps * ns[i]);
    for (size_t k = 0; k < grads[i].size(); ++k) {
      // Mostly N(0, 0.1^2); some tiny (eps matters), some large, some zero.
      const int kind = static_cast<int>(rng() % 20);
      float x = 0.1f * normal(rng);
      if (kind == 0) x *= 1e-6f;
      if (kind == 1) x *= 100.0f;
      if (kind == 2) x = 0.0f;
      grads[i][k] = x;
    }
  }

  char line[256];
  std::string cfg;
  auto hex = [&](const char* key, float x) {
    std::snprintf(line, sizeof(line), "%s %a\n", key, static_cast<double>(x));
    cfg += line;
  };
  hex("beta1", beta1);
  hex("beta2", beta2);
  hex("eps", eps);
  cfg += "steps " + std::to_string(kSteps) + "\n";
  cfg += "groups " + std::to_string(kGroups) + "\n";
  for (int i = 0; i < kGroups; ++i) {
    const std::string s = std::to_string(i);
    cfg += "n" + s + " " + std::to_string(ns[i]) + "\n";
    hex(("weight_decay" + s).c_str(), wds[i]);
    hex(("grad_scale" + s).c_str(), scales[i]);
    ASSERT_TRUE(WriteFile(dir + "/p" + s + ".bin", p0[i].data(), ns[i] * 4));
    ASSERT_TRUE(WriteFile(dir + "/g" + s + ".bin", grads[i].data(),
                          grads[i].size() * 4));
  }
  ASSERT_TRUE(WriteFile(dir + "/config.txt", cfg.data(), cfg.size()));
  ASSERT_TRUE(WriteFile(dir + "/lr.bin", lr.data(), lr.size() * 4));

  const std::string cmd =
      std::string(kPython) + " '" + ReferenceScript() + "' '" + dir + "'";
  const int rc = RunCommand(cmd, &out);
  ASSERT_EQ(rc, 0) << cmd << " failed (needs python3-torch):\n" << out;
  std::printf("%s", out.c_str());

  std::vector<SimdLevel> levels = SimdLevels();
  levels.insert(levels.begin(), SimdLevel::kScalar);
  for (SimdLevel level : levels) {
    double worst = 0;
    size_t exact = 0, total = 0;
    for (int i = 0; i < kGroups; ++i) {
      const size_t n = ns[i];
      std::vector<float> p = p0[i], m(n, 0.0f), v(n, 0.0f);
      std::vector<uint16_t> serve(n);
      for (int t = 0; t < kSteps; ++t) {
        AdamWHyper h;
        h.lr = lr[t * kGroups + i];
        h.beta1 = beta1;
        h.beta2 = beta2;
        h.eps = eps;
        h.weight_decay = wds[i];
        h.grad_scale = scales[i];
        h.step = t + 1;
        ASSERT_TRUE(AdamWStepAt(level, h, p.data(), &grads[i][t * n], m.data(),
                                v.data(), serve.data(), ServingType::kBf16, n));
      }
      const std::string s = std::to_string(i);
      const char* names[3] = {"p", "m", "v"};
      const std::vector<float>* ours[3] = {&p, &m, &v};
      for (int a = 0; a < 3; ++a) {
        std::vector<float> ref;
        ASSERT_TRUE(ReadFloats(dir + "/out_" + names[a] + s + ".bin", n, &ref))
            << "missing torch output " << names[a] << s;
        double maxabs = 0;
        for (float x : ref) maxabs = std::max(maxabs, std::fabs(double{x}));
        const double floor = std::max(1e-6 * maxabs, 1e-30);
        double arr_worst = 0;
        for (size_t k = 0; k < n; ++k) {
          const double d = std::fabs(double{(*ours[a])[k]} - double{ref[k]});
          const double rel = d / std::max(std::fabs(double{ref[k]}), floor);
          ASSERT_FALSE(std::isnan(rel)) << names[a] << s << "[" << k << "]";
          arr_worst = std::max(arr_worst, rel);
          exact += Bits((*ours[a])[k]) == Bits(ref[k]);
          ++total;
        }
        std::printf("  %-6s group %d %s: max rel err %.3g\n",
                    SimdLevelName(level), i, names[a], arr_worst);
        EXPECT_LE(arr_worst, 1e-6)
            << names[a] << s << " " << SimdLevelName(level);
        worst = std::max(worst, arr_worst);
      }
    }
    std::printf(
        "%s vs torch: max rel err %.3g over p, m, v; %zu of %zu values "
        "bit-identical\n",
        SimdLevelName(level), worst, exact, total);
  }
}

}  // namespace
}  // namespace zeroshard
