// Conversions between fp32 and the 16-bit floating-point formats bf16
// (bfloat16) and fp16 (IEEE 754 binary16), both held as raw uint16_t bit
// patterns.
//
// Contract (every function below):
//   * Narrowing (fp32 -> bf16/fp16) rounds to nearest, ties to even, always;
//     it does not depend on the MXCSR rounding mode, and it never flushes
//     subnormal inputs or outputs to zero.
//       - bf16: finite values that round past the largest finite bf16 become
//         +-Inf; +-Inf stays +-Inf; fp32 subnormals round exactly into the
//         bf16 subnormal range.
//       - fp16: |x| >= 65520 (the midpoint between 65504 and 2^16) becomes
//         +-Inf; fp16 subnormals (down to 2^-24) are produced exactly
//         rounded; |x| <= 2^-25 becomes +-0 (2^-25 is a tie, rounding to the
//         even value 0), which covers every fp32 subnormal.
//       - NaN: the result is a quiet NaN with the sign of the input and the
//         top payload bits of the input kept (the low bits that do not fit
//         are dropped, the quiet bit is set):
//           bf16 = (bits >> 16) | 0x0040
//           fp16 = sign | 0x7E00 | ((bits >> 13) & 0x03FF)
//         This is exactly what x86 F16C (vcvtps2ph) produces.
//   * Widening (bf16/fp16 -> fp32) is exact for every non-NaN input,
//     including +-0, subnormals and +-Inf.
//       - bf16 NaN: bit-preserving (result bits = bits << 16), so a
//         signalling bf16 NaN stays signalling.
//       - fp16 NaN: quieted, sign and payload kept:
//           sign | 0x7FC00000 | ((bits & 0x03FF) << 13)
//         This is exactly what x86 F16C (vcvtph2ps) produces.
//     Consequently bf16 -> fp32 -> bf16 is the identity except that a NaN
//     gets its quiet bit (0x0040) set, and fp16 -> fp32 -> fp16 is the
//     identity except that a NaN gets its quiet bit (0x0200) set.
//   * The array functions give results identical bit for bit to the scalar
//     functions, at every SimdLevel and for every length (tails included).
//     SIMD code assumes the default MXCSR (DAZ off); the project never
//     changes it.
//   * All functions are pure and thread-safe. For the array functions, src
//     and dst must not overlap; n == 0 is allowed (pointers may then be
//     null). Pointers need only the natural alignment of their element type.
#ifndef ZEROSHARD_COMMON_DTYPE_H_
#define ZEROSHARD_COMMON_DTYPE_H_

#include <cstddef>
#include <cstdint>

namespace zeroshard {

// Instruction-set levels the array conversions can run at. Ordered: a CPU
// supporting a level supports every lower level.
enum class SimdLevel {
  kScalar = 0,  // portable C++
  kAvx2 = 1,    // AVX2 + FMA + F16C
  kAvx512 = 2,  // AVX-512 F + BW + VL + DQ
};

// The highest level this CPU (and OS) supports, from CPUID and XCR0;
// detected once and cached.
// Always kScalar on non-x86 builds.
SimdLevel DetectSimdLevel();

// "scalar", "avx2", "avx512" (or "unknown" for an out-of-range value).
const char* SimdLevelName(SimdLevel level);

// True when `level` is a valid SimdLevel that this CPU can run
// (level <= DetectSimdLevel()).
bool SimdLevelUsable(SimdLevel level);

// Scalar reference conversions of one element (see the contract above).
uint16_t Fp32ToBf16(float f);
float Bf16ToFp32(uint16_t h);
uint16_t Fp32ToFp16(float f);
float Fp16ToFp32(uint16_t h);

// Array conversions of n elements, dispatched to DetectSimdLevel().
void ConvertFp32ToBf16(const float* src, uint16_t* dst, size_t n);
void ConvertBf16ToFp32(const uint16_t* src, float* dst, size_t n);
void ConvertFp32ToFp16(const float* src, uint16_t* dst, size_t n);
void ConvertFp16ToFp32(const uint16_t* src, float* dst, size_t n);

// The same at a forced level (for tests and benchmarks). If `level` is above
// DetectSimdLevel() (or not a valid SimdLevel) nothing is executed, dst is
// not touched, and false is returned; otherwise returns true.
bool ConvertFp32ToBf16At(SimdLevel level, const float* src, uint16_t* dst,
                         size_t n);
bool ConvertBf16ToFp32At(SimdLevel level, const uint16_t* src, float* dst,
                         size_t n);
bool ConvertFp32ToFp16At(SimdLevel level, const float* src, uint16_t* dst,
                         size_t n);
bool ConvertFp16ToFp32At(SimdLevel level, const uint16_t* src, float* dst,
                         size_t n);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_DTYPE_H_
