// The scalar conversion rules on raw bits, shared by the CPU reference
// (common/dtype.cc) and the CUDA kernels (common/cuda/dtype_cuda.cu) so that
// both follow one definition: round to nearest even, NaN kept NaN (quieted,
// sign and top payload bits kept), no denormal flush. The SIMD paths in
// dtype_avx2.cc / dtype_avx512.cc implement the same rules and are tested
// against these bit for bit.
#ifndef ZEROSHARD_COMMON_DTYPE_BITS_H_
#define ZEROSHARD_COMMON_DTYPE_BITS_H_

#include <cstdint>

#ifdef __CUDACC__
#define ZS_HOST_DEVICE __host__ __device__
#else
#define ZS_HOST_DEVICE
#endif

namespace zeroshard {
namespace dtype_bits {

ZS_HOST_DEVICE inline uint16_t Fp32BitsToBf16(uint32_t x) {
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) {  // NaN: quiet, keep sign + payload.
    return static_cast<uint16_t>((x >> 16) | 0x0040u);
  }
  // Round to nearest even on the 16 dropped bits. A carry out of the
  // mantissa correctly bumps the exponent (up to Inf); cannot overflow
  // uint32 since x <= 0xFF800000 here.
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

ZS_HOST_DEVICE inline uint16_t Fp32BitsToFp16(uint32_t x) {
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7FFFFFFFu;
  if (a > 0x7F800000u) {  // NaN: quiet, keep sign + top 10 payload bits.
    return static_cast<uint16_t>(sign | 0x7E00u | ((a >> 13) & 0x03FFu));
  }
  if (a >= 0x477FF000u) {  // >= 65520 (incl. Inf): rounds to Inf.
    return static_cast<uint16_t>(sign | 0x7C00u);
  }
  if (a >= 0x38800000u) {  // >= 2^-14: fp16 normal range.
    // Rebias the exponent (127 -> 15), then round 13 bits to nearest even;
    // a mantissa carry bumps the exponent (at most to 0x7BFF, see above).
    const uint32_t r = a - (112u << 23);
    return static_cast<uint16_t>(sign |
                                 ((r + 0x0FFFu + ((r >> 13) & 1u)) >> 13));
  }
  if (a <= 0x33000000u) {  // <= 2^-25 (incl. fp32 subnormals): rounds to 0.
    return sign;
  }
  // fp16 subnormal result: value = m * 2^(e - 150), unit 2^-24, so the
  // result is m >> (126 - e), rounded to nearest even. Here 102 <= e <= 112.
  const uint32_t e = a >> 23;
  const uint32_t m = (a & 0x007FFFFFu) | 0x00800000u;
  const uint32_t shift = 126u - e;  // 14..24
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;  // may reach 0x400: ok.
  return static_cast<uint16_t>(sign | q);
}

ZS_HOST_DEVICE inline uint32_t Bf16ToFp32Bits(uint16_t h) {
  return static_cast<uint32_t>(h) << 16;  // exact; NaN bit-preserving
}

ZS_HOST_DEVICE inline uint32_t Fp16ToFp32Bits(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x03FFu;
  if (exp == 0x1Fu) {
    // Inf, or NaN (quieted like vcvtph2ps does; payload and sign kept).
    return sign | 0x7F800000u | (mant != 0 ? 0x00400000u : 0u) | (mant << 13);
  }
  if (exp != 0) return sign | ((exp + 112u) << 23) | (mant << 13);
  if (mant == 0) return sign;
  // Subnormal: mant * 2^-24; normalize.
  uint32_t e = 127u - 14u;
  while ((mant & 0x0400u) == 0) {
    mant <<= 1;
    --e;
  }
  return sign | (e << 23) | ((mant & 0x03FFu) << 13);
}

}  // namespace dtype_bits
}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_DTYPE_BITS_H_
