#include "common/dtype.h"

#include <cstring>

#include "common/dtype_bits.h"
#include "common/dtype_internal.h"

#if ZS_DTYPE_X86
#include <cpuid.h>
#endif

namespace zeroshard {
namespace {

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

using dtype_bits::Fp16ToFp32Bits;
using dtype_bits::Fp32BitsToBf16;
using dtype_bits::Fp32BitsToFp16;

#if ZS_DTYPE_X86
uint64_t ReadXcr0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

// CPUID + XGETBV directly (rather than __builtin_cpu_supports, whose
// feature names vary between compilers): the CPU must have the features
// and the OS must save the AVX / AVX-512 register state (XCR0).
SimdLevel DetectUncached() {
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return SimdLevel::kScalar;
  const bool fma = ecx & (1u << 12);
  const bool osxsave = ecx & (1u << 27);
  const bool f16c = ecx & (1u << 29);
  if (!osxsave) return SimdLevel::kScalar;
  const uint64_t xcr0 = ReadXcr0();
  const bool os_avx = (xcr0 & 0x6) == 0x6;       // XMM + YMM state
  const bool os_avx512 = (xcr0 & 0xE6) == 0xE6;  // + opmask, ZMM state
  if (!os_avx || !__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) {
    return SimdLevel::kScalar;
  }
  const bool avx2 = ebx & (1u << 5);
  const bool avx512f = ebx & (1u << 16);
  const bool avx512dq = ebx & (1u << 17);
  const bool avx512bw = ebx & (1u << 30);
  const bool avx512vl = ebx & (1u << 31);
  if (!(avx2 && fma && f16c)) return SimdLevel::kScalar;
  // The AVX-512 level also relies on the AVX2 / F16C-level features above.
  if (os_avx512 && avx512f && avx512dq && avx512bw && avx512vl) {
    return SimdLevel::kAvx512;
  }
  return SimdLevel::kAvx2;
}
#else
SimdLevel DetectUncached() { return SimdLevel::kScalar; }
#endif

using PackFn = void (*)(const float*, uint16_t*, size_t);
using UnpackFn = void (*)(const uint16_t*, float*, size_t);

struct Kernels {
  PackFn fp32_to_bf16;
  UnpackFn bf16_to_fp32;
  PackFn fp32_to_fp16;
  UnpackFn fp16_to_fp32;
};

// Only called with a level for which SimdLevelUsable() is true.
const Kernels& KernelsFor(SimdLevel level) {
  namespace di = dtype_internal;
  static constexpr Kernels kScalar = {
      di::Fp32ToBf16Scalar, di::Bf16ToFp32Scalar, di::Fp32ToFp16Scalar,
      di::Fp16ToFp32Scalar};
#if ZS_DTYPE_X86
  static constexpr Kernels kAvx2 = {di::Fp32ToBf16Avx2, di::Bf16ToFp32Avx2,
                                    di::Fp32ToFp16Avx2, di::Fp16ToFp32Avx2};
  static constexpr Kernels kAvx512 = {
      di::Fp32ToBf16Avx512, di::Bf16ToFp32Avx512, di::Fp32ToFp16Avx512,
      di::Fp16ToFp32Avx512};
  switch (level) {
    case SimdLevel::kAvx512:
      return kAvx512;
    case SimdLevel::kAvx2:
      return kAvx2;
    case SimdLevel::kScalar:
      break;
  }
#endif
  return kScalar;
}

const Kernels& Best() {
  static const Kernels& k = KernelsFor(DetectSimdLevel());
  return k;
}

}  // namespace

SimdLevel DetectSimdLevel() {
  static const SimdLevel level = DetectUncached();
  return level;
}

bool SimdLevelUsable(SimdLevel level) {
  switch (level) {
    case SimdLevel::kScalar:
    case SimdLevel::kAvx2:
    case SimdLevel::kAvx512:
      return static_cast<int>(level) <= static_cast<int>(DetectSimdLevel());
  }
  return false;
}

const char* SimdLevelName(SimdLevel level) {
  switch (level) {
    case SimdLevel::kScalar:
      return "scalar";
    case SimdLevel::kAvx2:
      return "avx2";
    case SimdLevel::kAvx512:
      return "avx512";
  }
  return "unknown";
}

uint16_t Fp32ToBf16(float f) { return Fp32BitsToBf16(FloatBits(f)); }

float Bf16ToFp32(uint16_t h) {
  return BitsFloat(static_cast<uint32_t>(h) << 16);
}

uint16_t Fp32ToFp16(float f) { return Fp32BitsToFp16(FloatBits(f)); }

float Fp16ToFp32(uint16_t h) { return BitsFloat(Fp16ToFp32Bits(h)); }

namespace dtype_internal {

void Fp32ToBf16Scalar(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = Fp32BitsToBf16(FloatBits(src[i]));
}

void Bf16ToFp32Scalar(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    dst[i] = BitsFloat(static_cast<uint32_t>(src[i]) << 16);
  }
}

void Fp32ToFp16Scalar(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = Fp32BitsToFp16(FloatBits(src[i]));
}

void Fp16ToFp32Scalar(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = BitsFloat(Fp16ToFp32Bits(src[i]));
}

}  // namespace dtype_internal

void ConvertFp32ToBf16(const float* src, uint16_t* dst, size_t n) {
  Best().fp32_to_bf16(src, dst, n);
}

void ConvertBf16ToFp32(const uint16_t* src, float* dst, size_t n) {
  Best().bf16_to_fp32(src, dst, n);
}

void ConvertFp32ToFp16(const float* src, uint16_t* dst, size_t n) {
  Best().fp32_to_fp16(src, dst, n);
}

void ConvertFp16ToFp32(const uint16_t* src, float* dst, size_t n) {
  Best().fp16_to_fp32(src, dst, n);
}

bool ConvertFp32ToBf16At(SimdLevel level, const float* src, uint16_t* dst,
                         size_t n) {
  if (!SimdLevelUsable(level)) return false;
  KernelsFor(level).fp32_to_bf16(src, dst, n);
  return true;
}

bool ConvertBf16ToFp32At(SimdLevel level, const uint16_t* src, float* dst,
                         size_t n) {
  if (!SimdLevelUsable(level)) return false;
  KernelsFor(level).bf16_to_fp32(src, dst, n);
  return true;
}

bool ConvertFp32ToFp16At(SimdLevel level, const float* src, uint16_t* dst,
                         size_t n) {
  if (!SimdLevelUsable(level)) return false;
  KernelsFor(level).fp32_to_fp16(src, dst, n);
  return true;
}

bool ConvertFp16ToFp32At(SimdLevel level, const uint16_t* src, float* dst,
                         size_t n) {
  if (!SimdLevelUsable(level)) return false;
  KernelsFor(level).fp16_to_fp32(src, dst, n);
  return true;
}

}  // namespace zeroshard
