#include "common/dtype.h"

#include <cfenv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace zeroshard {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// ---------------------------------------------------------------------------
// Independent reference, computed with double arithmetic (every fp32 and
// every bf16/fp16 value is exact in double, and so are the scalings below).

struct Format {
  int mant_bits;  // explicit significand bits
  int exp_bits;
  int Bias() const { return (1 << (exp_bits - 1)) - 1; }
  int Emin() const { return 1 - Bias(); }  // exponent of the smallest normal
  int Emax() const { return Bias(); }
  uint16_t InfBits() const {
    return static_cast<uint16_t>(((1 << exp_bits) - 1) << mant_bits);
  }
  uint16_t SignBit() const {
    return static_cast<uint16_t>(1u << (mant_bits + exp_bits));
  }
};
constexpr Format kBf16{7, 8};
constexpr Format kFp16{10, 5};

// Encodes |v| (already representable in `fmt`, or Inf) as a bit pattern.
uint16_t Encode(double v, bool negative, Format fmt) {
  const uint16_t sign = negative ? fmt.SignBit() : 0;
  if (std::isinf(v)) return sign | fmt.InfBits();
  if (v == 0) return sign;
  int e;
  std::frexp(v, &e);
  const int ue = e - 1;   // v in [2^ue, 2^(ue+1))
  if (ue < fmt.Emin()) {  // subnormal: integer multiple of 2^(emin - mant)
    const double m = std::ldexp(v, fmt.mant_bits - fmt.Emin());
    EXPECT_EQ(m, std::floor(m));
    return sign | static_cast<uint16_t>(m);
  }
  const double m =
      std::ldexp(v, fmt.mant_bits - ue) - std::ldexp(1.0, fmt.mant_bits);
  EXPECT_EQ(m, std::floor(m));
  return sign | static_cast<uint16_t>(((ue + fmt.Bias()) << fmt.mant_bits) |
                                      static_cast<int>(m));
}

// Reference narrowing of a non-NaN fp32: exact round-to-nearest-even.
uint16_t RefNarrow(float f, Format fmt) {
  const bool negative = std::signbit(f);
  const double v = std::fabs(static_cast<double>(f));
  if (std::isinf(v) || v == 0) return Encode(v, negative, fmt);
  int e;
  std::frexp(v, &e);
  const int ue = e - 1;
  // Spacing of representable values around v (subnormals: fixed spacing).
  const int quantum_exp = std::max(ue, fmt.Emin()) - fmt.mant_bits;
  // nearbyint rounds to nearest even in the default rounding mode.
  const double rounded =
      std::ldexp(std::nearbyint(std::ldexp(v, -quantum_exp)), quantum_exp);
  if (rounded >= std::ldexp(1.0, fmt.Emax() + 1)) {
    return Encode(HUGE_VAL, negative, fmt);
  }
  return Encode(rounded, negative, fmt);
}

// Reference widening of a 16-bit pattern to a double (NaN for NaN).
double RefWiden(uint16_t h, Format fmt) {
  const int exp = (h >> fmt.mant_bits) & ((1 << fmt.exp_bits) - 1);
  const int mant = h & ((1 << fmt.mant_bits) - 1);
  const double sign = (h & fmt.SignBit()) ? -1.0 : 1.0;
  if (exp == (1 << fmt.exp_bits) - 1) {
    return mant == 0 ? sign * HUGE_VAL : std::nan("");
  }
  if (exp == 0) return sign * std::ldexp(mant, fmt.Emin() - fmt.mant_bits);
  return sign * std::ldexp(mant + (1 << fmt.mant_bits),
                           exp - fmt.Bias() - fmt.mant_bits);
}

bool IsNan32(uint32_t x) { return (x & 0x7FFFFFFFu) > 0x7F800000u; }

// The documented NaN rules (dtype.h), written independently of dtype.cc.
uint16_t NanToBf16(uint32_t x) {
  return static_cast<uint16_t>((x >> 16) | 0x0040u);
}
uint16_t NanToFp16(uint32_t x) {
  return static_cast<uint16_t>(((x >> 16) & 0x8000u) | 0x7C00u | 0x0200u |
                               ((x >> 13) & 0x03FFu));
}

uint16_t ExpectedBf16(uint32_t x) {
  return IsNan32(x) ? NanToBf16(x) : RefNarrow(FromBits(x), kBf16);
}
uint16_t ExpectedFp16(uint32_t x) {
  return IsNan32(x) ? NanToFp16(x) : RefNarrow(FromBits(x), kFp16);
}

// ---------------------------------------------------------------------------
// Input sets.

std::vector<uint32_t> RandomFp32Bits(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> v(n);
  for (auto& x : v) x = static_cast<uint32_t>(rng());
  return v;
}

// Every upper half (sign, exponent, top 7 mantissa bits) combined with low
// halves on and around the bf16 and fp16 rounding boundaries.
std::vector<uint32_t> BoundarySweepBits() {
  static constexpr uint16_t kLow[] = {
      0x0000, 0x0001, 0x0FFF, 0x1000, 0x1001, 0x2FFF, 0x3000, 0x3001,
      0x5000, 0x7000, 0x7FFF, 0x8000, 0x8001, 0x9000, 0xB000, 0xFFFF};
  std::vector<uint32_t> v;
  v.reserve(65536 * (sizeof(kLow) / sizeof(kLow[0])));
  for (uint32_t hi = 0; hi < 65536; ++hi) {
    for (uint16_t lo : kLow) v.push_back((hi << 16) | lo);
  }
  return v;
}

// For each fp32 exponent whose values land in (or next to) the fp16
// subnormal range, every exact halfway point between two fp16 subnormals
// and its two fp32 neighbours, both signs.
std::vector<uint32_t> Fp16SubnormalHalfwayBits() {
  std::vector<uint32_t> v;
  for (uint32_t e = 100; e <= 113; ++e) {
    const int shift = 126 - static_cast<int>(e);  // bits dropped
    if (shift <= 0) continue;
    for (uint32_t q = 0; (q << shift) < (1u << 24); ++q) {
      const uint32_t mid = (q << shift) + (1u << (shift - 1));
      for (int d = -1; d <= 1; ++d) {
        const uint32_t m = mid + d;  // full 24-bit significand
        if (m < (1u << 23) || m >= (1u << 24)) continue;
        const uint32_t bits = (e << 23) | (m & 0x7FFFFFu);
        v.push_back(bits);
        v.push_back(bits | 0x80000000u);
      }
    }
  }
  return v;
}

// ---------------------------------------------------------------------------
// Scalar reference functions.

TEST(DtypeTest, SimdLevelNames) {
  EXPECT_STREQ(SimdLevelName(SimdLevel::kScalar), "scalar");
  EXPECT_STREQ(SimdLevelName(SimdLevel::kAvx2), "avx2");
  EXPECT_STREQ(SimdLevelName(SimdLevel::kAvx512), "avx512");
  EXPECT_STREQ(SimdLevelName(static_cast<SimdLevel>(7)), "unknown");
  EXPECT_EQ(DetectSimdLevel(), DetectSimdLevel());
  std::printf("[ INFO     ] DetectSimdLevel() = %s\n",
              SimdLevelName(DetectSimdLevel()));
}

TEST(DtypeTest, Bf16ExhaustiveWidenAndRoundTrip) {
  size_t nans = 0;
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = static_cast<uint16_t>(i);
    const float f = Bf16ToFp32(h);
    ASSERT_EQ(Bits(f), i << 16) << std::hex << i;
    if (IsNan32(i << 16)) {
      ++nans;
      ASSERT_TRUE(std::isnan(f));
      // Narrowing a NaN sets the quiet bit, keeps sign and payload.
      ASSERT_EQ(Fp32ToBf16(f), h | 0x0040) << std::hex << i;
    } else {
      ASSERT_EQ(Bits(f), Bits(static_cast<float>(RefWiden(h, kBf16))))
          << std::hex << i;
      ASSERT_EQ(Fp32ToBf16(f), h) << std::hex << i;
    }
  }
  EXPECT_EQ(nans, 2u * 127u);
}

TEST(DtypeTest, Fp16ExhaustiveWidenAndRoundTrip) {
  size_t nans = 0;
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = static_cast<uint16_t>(i);
    const float f = Fp16ToFp32(h);
    const double ref = RefWiden(h, kFp16);
    if (std::isnan(ref)) {
      ++nans;
      ASSERT_TRUE(std::isnan(f));
      // Widening quiets the NaN and keeps sign and payload (like vcvtph2ps).
      ASSERT_EQ(Bits(f),
                ((i & 0x8000u) << 16) | 0x7FC00000u | ((i & 0x03FFu) << 13))
          << std::hex << i;
      ASSERT_EQ(Fp32ToFp16(f), h | 0x0200) << std::hex << i;
    } else {
      ASSERT_EQ(Bits(f), Bits(static_cast<float>(ref))) << std::hex << i;
      ASSERT_EQ(Fp32ToFp16(f), h) << std::hex << i;
    }
  }
  EXPECT_EQ(nans, 2u * 1023u);
}

struct EdgeCase {
  uint32_t in;
  uint16_t out;
};

TEST(DtypeTest, Bf16EdgeCases) {
  static constexpr EdgeCase kCases[] = {
      {0x00000000, 0x0000},  // +0
      {0x80000000, 0x8000},  // -0
      {0x3F800000, 0x3F80},  // 1
      {0x3F808000, 0x3F80},  // tie, lsb even: down
      {0x3F818000, 0x3F82},  // tie, lsb odd: up
      {0x3F807FFF, 0x3F80},  // just below tie
      {0x3F808001, 0x3F81},  // just above tie
      {0xBF818000, 0xBF82},  // negative tie up
      {0x3FFF8000, 0x4000},  // mantissa carry into exponent
      {0x7F7F0000, 0x7F7F},  // largest finite bf16
      {0x7F7F7FFF, 0x7F7F},  // rounds down to largest finite
      {0x7F7F8000, 0x7F80},  // tie above largest finite (odd): Inf
      {0x7F7FFFFF, 0x7F80},  // FLT_MAX -> Inf
      {0xFF7FFFFF, 0xFF80},  // -FLT_MAX -> -Inf
      {0x7F800000, 0x7F80},  // +Inf
      {0xFF800000, 0xFF80},  // -Inf
      {0x00000001, 0x0000},  // smallest fp32 subnormal -> 0
      {0x80000001, 0x8000},  // -> -0
      {0x00008000, 0x0000},  // tie at 0 (even): 0
      {0x00008001, 0x0001},  // smallest bf16 subnormal
      {0x00018000, 0x0002},  // subnormal tie, odd: up
      {0x00010000, 0x0001},  // exact subnormal
      {0x007F8000, 0x0080},  // largest subnormal tie -> smallest normal
      {0x007FFFFF, 0x0080},  // largest fp32 subnormal -> smallest normal
      {0x00800000, 0x0080},  // FLT_MIN exact
      {0x7FC00000, 0x7FC0},  // quiet NaN
      {0xFFC00000, 0xFFC0},  // negative quiet NaN
      {0x7F800001, 0x7FC0},  // signalling NaN, payload only in low bits
      {0x7F810000, 0x7FC1},  // signalling NaN: quiet bit set, payload kept
      {0x7FBF0000, 0x7FFF},  //
      {0xFFFFFFFF, 0xFFFF},  // all-ones NaN (no rounding carry!)
      {0x7FFFFFFF, 0x7FFF},
  };
  for (const EdgeCase& c : kCases) {
    EXPECT_EQ(Fp32ToBf16(FromBits(c.in)), c.out) << std::hex << c.in;
    EXPECT_EQ(ExpectedBf16(c.in), c.out) << "reference " << std::hex << c.in;
  }
}

TEST(DtypeTest, Fp16EdgeCases) {
  static constexpr EdgeCase kCases[] = {
      {0x00000000, 0x0000},  // +0
      {0x80000000, 0x8000},  // -0
      {0x3F800000, 0x3C00},  // 1
      {0x3F801000, 0x3C00},  // 1 + 2^-11: tie, even: down
      {0x3F803000, 0x3C02},  // 1 + 3*2^-11: tie, odd: up
      {0x3F801001, 0x3C01},  // just above tie
      {0x3F800FFF, 0x3C00},  // just below tie
      {0x477FE000, 0x7BFF},  // 65504, largest finite
      {0x477FEFFF, 0x7BFF},  // just below 65520: largest finite
      {0x477FF000, 0x7C00},  // 65520: tie (odd) -> Inf
      {0x47800000, 0x7C00},  // 65536 -> Inf
      {0xC77FF000, 0xFC00},  // -65520 -> -Inf
      {0x7F7FFFFF, 0x7C00},  // FLT_MAX -> Inf
      {0x7F800000, 0x7C00},  // +Inf
      {0xFF800000, 0xFC00},  // -Inf
      {0x38800000, 0x0400},  // 2^-14: smallest normal
      {0x387FC000, 0x03FF},  // 1023 * 2^-24: largest subnormal
      {0x387FE000, 0x0400},  // 1023.5 * 2^-24: tie, odd -> smallest normal
      {0x387FDFFF, 0x03FF},  // just below that tie
      {0x33800000, 0x0001},  // 2^-24: smallest subnormal
      {0xB3800000, 0x8001},  // -2^-24
      {0x33000000, 0x0000},  // 2^-25: tie, even -> 0
      {0xB3000000, 0x8000},  // -2^-25 -> -0
      {0x33000001, 0x0001},  // just above 2^-25 -> smallest subnormal
      {0x32FFFFFF, 0x0000},  // just below 2^-25 -> 0
      {0x33C00000, 0x0002},  // 1.5 * 2^-24: tie, odd -> 2
      {0x34200000, 0x0002},  // 2.5 * 2^-24: tie, even -> 2
      {0x34300000, 0x0003},  // 2.75 * 2^-24 -> 3
      {0x00000001, 0x0000},  // fp32 subnormal -> 0
      {0x807FFFFF, 0x8000},  // largest negative fp32 subnormal -> -0
      {0x00800000, 0x0000},  // FLT_MIN -> 0
      {0x7FC00000, 0x7E00},  // quiet NaN
      {0xFFC00000, 0xFE00},  // negative quiet NaN
      {0x7F800001, 0x7E00},  // signalling NaN, payload only in low bits
      {0x7F802000, 0x7E01},  // signalling NaN: quiet bit set, payload kept
      {0x7FA00000, 0x7F00},  //
      {0xFFC12345, 0xFE09},  //
      {0x7FFFFFFF, 0x7FFF},  //
  };
  for (const EdgeCase& c : kCases) {
    EXPECT_EQ(Fp32ToFp16(FromBits(c.in)), c.out) << std::hex << c.in;
    EXPECT_EQ(ExpectedFp16(c.in), c.out) << "reference " << std::hex << c.in;
  }
}

// Checks the scalar narrowing functions against the double reference.
void CheckNarrowAgainstReference(const std::vector<uint32_t>& inputs) {
  for (uint32_t x : inputs) {
    const float f = FromBits(x);
    ASSERT_EQ(Fp32ToBf16(f), ExpectedBf16(x)) << "bf16 " << std::hex << x;
    ASSERT_EQ(Fp32ToFp16(f), ExpectedFp16(x)) << "fp16 " << std::hex << x;
  }
}

TEST(DtypeTest, NarrowRandomMatchesReference) {
  ASSERT_EQ(std::fegetround(), FE_TONEAREST);
  CheckNarrowAgainstReference(RandomFp32Bits(size_t{1} << 22, 1));
}

TEST(DtypeTest, NarrowBoundarySweepMatchesReference) {
  CheckNarrowAgainstReference(BoundarySweepBits());
}

TEST(DtypeTest, NarrowFp16SubnormalHalfwayMatchesReference) {
  const std::vector<uint32_t> inputs = Fp16SubnormalHalfwayBits();
  EXPECT_GT(inputs.size(), 10000u);
  CheckNarrowAgainstReference(inputs);
}

// ---------------------------------------------------------------------------
// Array conversions: every usable level equals the scalar functions.

constexpr SimdLevel kAllLevels[] = {SimdLevel::kScalar, SimdLevel::kAvx2,
                                    SimdLevel::kAvx512};

TEST(DtypeTest, AtRejectsUnsupportedLevelsWithoutTouchingDst) {
  float src32[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  uint16_t src16[4] = {0x3C00, 0x3F80, 0, 0};
  std::vector<SimdLevel> bad = {static_cast<SimdLevel>(3),
                                static_cast<SimdLevel>(-1)};
  for (SimdLevel level : kAllLevels) {
    if (static_cast<int>(level) > static_cast<int>(DetectSimdLevel())) {
      bad.push_back(level);
    }
  }
  for (SimdLevel level : bad) {
    uint16_t dst16[4] = {0xAAAA, 0xAAAA, 0xAAAA, 0xAAAA};
    float dst32[4] = {-7.0f, -7.0f, -7.0f, -7.0f};
    EXPECT_FALSE(ConvertFp32ToBf16At(level, src32, dst16, 4));
    EXPECT_FALSE(ConvertFp32ToFp16At(level, src32, dst16, 4));
    EXPECT_FALSE(ConvertBf16ToFp32At(level, src16, dst32, 4));
    EXPECT_FALSE(ConvertFp16ToFp32At(level, src16, dst32, 4));
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(dst16[i], 0xAAAA);
      EXPECT_EQ(dst32[i], -7.0f);
    }
  }
  // Supported levels accept n == 0 with null pointers.
  for (SimdLevel level : kAllLevels) {
    if (static_cast<int>(level) > static_cast<int>(DetectSimdLevel())) break;
    EXPECT_TRUE(ConvertFp32ToBf16At(level, nullptr, nullptr, 0));
    EXPECT_TRUE(ConvertFp32ToFp16At(level, nullptr, nullptr, 0));
    EXPECT_TRUE(ConvertBf16ToFp32At(level, nullptr, nullptr, 0));
    EXPECT_TRUE(ConvertFp16ToFp32At(level, nullptr, nullptr, 0));
  }
}

class DtypeSimdTest : public ::testing::TestWithParam<SimdLevel> {
 protected:
  void SetUp() override {
    if (static_cast<int>(GetParam()) > static_cast<int>(DetectSimdLevel())) {
      GTEST_SKIP() << "level " << SimdLevelName(GetParam())
                   << " not supported by this CPU (max "
                   << SimdLevelName(DetectSimdLevel()) << ")";
    }
    std::printf("[ INFO     ] testing level %s\n", SimdLevelName(GetParam()));
  }
  SimdLevel level() const { return GetParam(); }
};

std::vector<uint16_t> All16() {
  std::vector<uint16_t> v(65536);
  for (uint32_t i = 0; i < 65536; ++i) v[i] = static_cast<uint16_t>(i);
  return v;
}

std::vector<float> AsFloats(const std::vector<uint32_t>& bits) {
  std::vector<float> v(bits.size());
  std::memcpy(v.data(), bits.data(), bits.size() * sizeof(float));
  return v;
}

// Whole-array conversions at level() vs the scalar element functions.
void CheckPack(SimdLevel level, const std::vector<float>& src) {
  std::vector<uint16_t> bf(src.size()), fp(src.size());
  ASSERT_TRUE(ConvertFp32ToBf16At(level, src.data(), bf.data(), src.size()));
  ASSERT_TRUE(ConvertFp32ToFp16At(level, src.data(), fp.data(), src.size()));
  for (size_t i = 0; i < src.size(); ++i) {
    ASSERT_EQ(bf[i], Fp32ToBf16(src[i])) << "bf16 " << std::hex << Bits(src[i]);
    ASSERT_EQ(fp[i], Fp32ToFp16(src[i])) << "fp16 " << std::hex << Bits(src[i]);
  }
}

TEST_P(DtypeSimdTest, UnpackExhaustive) {
  const std::vector<uint16_t> src = All16();
  std::vector<float> bf(src.size()), fp(src.size());
  ASSERT_TRUE(ConvertBf16ToFp32At(level(), src.data(), bf.data(), src.size()));
  ASSERT_TRUE(ConvertFp16ToFp32At(level(), src.data(), fp.data(), src.size()));
  for (size_t i = 0; i < src.size(); ++i) {
    ASSERT_EQ(Bits(bf[i]), Bits(Bf16ToFp32(src[i]))) << std::hex << i;
    ASSERT_EQ(Bits(fp[i]), Bits(Fp16ToFp32(src[i]))) << std::hex << i;
  }
  // Narrow the exhaustive widened sets back (exact values, NaNs, Infs).
  CheckPack(level(), bf);
  CheckPack(level(), fp);
}

TEST_P(DtypeSimdTest, PackRandom) {
  CheckPack(level(), AsFloats(RandomFp32Bits(size_t{1} << 22, 2)));
}

TEST_P(DtypeSimdTest, PackBoundarySweep) {
  CheckPack(level(), AsFloats(BoundarySweepBits()));
  CheckPack(level(), AsFloats(Fp16SubnormalHalfwayBits()));
}

// Short and odd lengths at misaligned offsets; elements outside [0, n) of
// dst must be left untouched.
TEST_P(DtypeSimdTest, LengthsOffsetsAndGuards) {
  static constexpr size_t kLengths[] = {0,  1,  7,  15,   16,
                                        17, 31, 33, 1000, 1023};
  static constexpr size_t kGuard = 64;
  const std::vector<uint32_t> bits = RandomFp32Bits(2048 + 2 * kGuard, 3);
  const std::vector<float> src32 = AsFloats(bits);
  std::vector<uint16_t> src16(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) {
    src16[i] = static_cast<uint16_t>(bits[i] ^ (bits[i] >> 16));
  }
  for (size_t n : kLengths) {
    for (size_t off = 0; off < 4; ++off) {
      SCOPED_TRACE("n=" + std::to_string(n) + " offset=" + std::to_string(off));
      // Narrowing.
      for (int kind = 0; kind < 2; ++kind) {
        std::vector<uint16_t> dst(n + 2 * kGuard + 4, 0xA5A5);
        const float* s = src32.data() + off;
        uint16_t* d = dst.data() + kGuard + off;
        ASSERT_TRUE(kind == 0 ? ConvertFp32ToBf16At(level(), s, d, n)
                              : ConvertFp32ToFp16At(level(), s, d, n));
        for (size_t i = 0; i < dst.size(); ++i) {
          const size_t lo = kGuard + off;
          if (i >= lo && i < lo + n) {
            const float f = s[i - lo];
            ASSERT_EQ(dst[i], kind == 0 ? Fp32ToBf16(f) : Fp32ToFp16(f)) << i;
          } else {
            ASSERT_EQ(dst[i], 0xA5A5) << "guard " << i;
          }
        }
      }
      // Widening.
      for (int kind = 0; kind < 2; ++kind) {
        std::vector<uint32_t> dst(n + 2 * kGuard + 4, 0xDEADBEEF);
        const uint16_t* s = src16.data() + off;
        float* d = reinterpret_cast<float*>(dst.data()) + kGuard + off;
        ASSERT_TRUE(kind == 0 ? ConvertBf16ToFp32At(level(), s, d, n)
                              : ConvertFp16ToFp32At(level(), s, d, n));
        for (size_t i = 0; i < dst.size(); ++i) {
          const size_t lo = kGuard + off;
          if (i >= lo && i < lo + n) {
            const uint16_t h = s[i - lo];
            ASSERT_EQ(dst[i], Bits(kind == 0 ? Bf16ToFp32(h) : Fp16ToFp32(h)))
                << i;
          } else {
            ASSERT_EQ(dst[i], 0xDEADBEEFu) << "guard " << i;
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllLevels, DtypeSimdTest,
                         ::testing::ValuesIn(kAllLevels),
                         [](const ::testing::TestParamInfo<SimdLevel>& info) {
                           return std::string(SimdLevelName(info.param));
                         });

TEST(DtypeTest, DispatchedMatchesScalar) {
  const std::vector<float> src = AsFloats(RandomFp32Bits(4099, 4));
  std::vector<uint16_t> bf(src.size()), fp(src.size());
  ConvertFp32ToBf16(src.data(), bf.data(), src.size());
  ConvertFp32ToFp16(src.data(), fp.data(), src.size());
  std::vector<float> bf_back(src.size()), fp_back(src.size());
  ConvertBf16ToFp32(bf.data(), bf_back.data(), bf.size());
  ConvertFp16ToFp32(fp.data(), fp_back.data(), fp.size());
  for (size_t i = 0; i < src.size(); ++i) {
    ASSERT_EQ(bf[i], Fp32ToBf16(src[i]));
    ASSERT_EQ(fp[i], Fp32ToFp16(src[i]));
    ASSERT_EQ(Bits(bf_back[i]), Bits(Bf16ToFp32(bf[i])));
    ASSERT_EQ(Bits(fp_back[i]), Bits(Fp16ToFp32(fp[i])));
  }
}

}  // namespace
}  // namespace zeroshard
