#include "common/crc32c.h"

#include <cstring>

#include "common/crc32c_internal.h"

#if defined(__x86_64__)
#define ZS_CRC32C_HW 1
#include <immintrin.h>
#define ZS_TARGET_SSE42 __attribute__((target("sse4.2")))
#else
#define ZS_CRC32C_HW 0
#endif

namespace zeroshard {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected 0x1EDC6F41

// kTables.t[0] is the classic byte-at-a-time table; t[k][b] is the register
// after feeding byte b followed by k zero bytes (for slicing-by-8).
struct Tables {
  uint32_t t[8][256];
  constexpr Tables() : t() {
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t c = b;
      for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1u) ? kPoly : 0u);
      t[0][b] = c;
    }
    for (int k = 1; k < 8; ++k) {
      for (uint32_t b = 0; b < 256; ++b) {
        const uint32_t c = t[k - 1][b];
        t[k][b] = (c >> 8) ^ t[0][c & 0xFFu];
      }
    }
  }
};
constexpr Tables kTables;

inline uint32_t Load32Le(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}

#if ZS_CRC32C_HW

// Stream lengths for the three-way interleaved hardware loop (powers of 2).
constexpr size_t kLong = 8192;
constexpr size_t kShort = 256;

// Linear operators over GF(2) as 32 columns.
uint32_t MatTimes(const uint32_t* mat, uint32_t vec) {
  uint32_t sum = 0;
  for (int i = 0; vec != 0; ++i, vec >>= 1) {
    if (vec & 1u) sum ^= mat[i];
  }
  return sum;
}

void MatSquare(uint32_t* square, const uint32_t* mat) {
  for (int i = 0; i < 32; ++i) square[i] = MatTimes(mat, mat[i]);
}

// Tables applying the operator "feed `bytes` zero bytes" (bytes a power of
// two) to a raw CRC register, one table per register byte.
struct ZeroShift {
  uint32_t t[4][256];

  explicit ZeroShift(size_t bytes) {
    uint32_t op[32], tmp[32];
    op[0] = kPoly;  // one zero bit
    for (int i = 1; i < 32; ++i) op[i] = 1u << (i - 1);
    for (size_t bits = 1; bits < bytes * 8; bits *= 2) {
      MatSquare(tmp, op);
      std::memcpy(op, tmp, sizeof(op));
    }
    for (uint32_t b = 0; b < 256; ++b) {
      for (int k = 0; k < 4; ++k) t[k][b] = MatTimes(op, b << (8 * k));
    }
  }

  uint32_t Apply(uint32_t crc) const {
    return t[0][crc & 0xFFu] ^ t[1][(crc >> 8) & 0xFFu] ^
           t[2][(crc >> 16) & 0xFFu] ^ t[3][crc >> 24];
  }
};

const ZeroShift& LongShift() {
  static const ZeroShift* const shift = new ZeroShift(kLong);
  return *shift;
}

const ZeroShift& ShortShift() {
  static const ZeroShift* const shift = new ZeroShift(kShort);
  return *shift;
}

ZS_TARGET_SSE42 inline uint64_t Load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Three independent crc32 streams over consecutive blocks of `block` bytes
// hide the instruction's 3-cycle latency; the partial CRCs are then merged
// by shifting over the following blocks' length.
ZS_TARGET_SSE42 inline uint64_t ThreeWay(const uint8_t*& p, size_t& n,
                                         uint64_t crc0, size_t block,
                                         const ZeroShift& shift) {
  while (n >= 3 * block) {
    uint64_t crc1 = 0, crc2 = 0;
    const uint8_t* const end = p + block;
    do {
      crc0 = _mm_crc32_u64(crc0, Load64(p));
      crc1 = _mm_crc32_u64(crc1, Load64(p + block));
      crc2 = _mm_crc32_u64(crc2, Load64(p + 2 * block));
      p += 8;
    } while (p < end);
    crc0 = shift.Apply(static_cast<uint32_t>(crc0)) ^ crc1;
    crc0 = shift.Apply(static_cast<uint32_t>(crc0)) ^ crc2;
    p += 2 * block;
    n -= 3 * block;
  }
  return crc0;
}

bool DetectHardware() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
}

#endif  // ZS_CRC32C_HW

}  // namespace

uint32_t Crc32cScalar(const void* data, size_t n, uint32_t init) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint32_t crc = ~init;
  for (size_t i = 0; i < n; ++i) {
    crc = (crc >> 8) ^ kTables.t[0][(crc ^ p[i]) & 0xFFu];
  }
  return ~crc;
}

namespace crc32c_internal {

uint32_t Slicing8(const void* data, size_t n, uint32_t init) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  const auto& t = kTables.t;
  uint32_t crc = ~init;
  for (; n >= 8; n -= 8, p += 8) {
    const uint32_t lo = crc ^ Load32Le(p);
    const uint32_t hi = Load32Le(p + 4);
    crc = t[7][lo & 0xFFu] ^ t[6][(lo >> 8) & 0xFFu] ^
          t[5][(lo >> 16) & 0xFFu] ^ t[4][lo >> 24] ^ t[3][hi & 0xFFu] ^
          t[2][(hi >> 8) & 0xFFu] ^ t[1][(hi >> 16) & 0xFFu] ^ t[0][hi >> 24];
  }
  for (; n > 0; --n, ++p) crc = (crc >> 8) ^ t[0][(crc ^ *p) & 0xFFu];
  return ~crc;
}

#if ZS_CRC32C_HW

bool HardwareAvailable() {
  static const bool available = DetectHardware();
  return available;
}

ZS_TARGET_SSE42 uint32_t Hardware(const void* data, size_t n, uint32_t init) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint64_t crc = ~init;
  // Align to 8 bytes for the 64-bit loads.
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7u) != 0) {
    crc = _mm_crc32_u8(static_cast<uint32_t>(crc), *p++);
    --n;
  }
  if (n >= 3 * kLong) crc = ThreeWay(p, n, crc, kLong, LongShift());
  if (n >= 3 * kShort) crc = ThreeWay(p, n, crc, kShort, ShortShift());
  for (; n >= 8; n -= 8, p += 8) crc = _mm_crc32_u64(crc, Load64(p));
  for (; n > 0; --n, ++p) crc = _mm_crc32_u8(static_cast<uint32_t>(crc), *p);
  return ~static_cast<uint32_t>(crc);
}

#else  // !ZS_CRC32C_HW

bool HardwareAvailable() { return false; }

uint32_t Hardware(const void* data, size_t n, uint32_t init) {
  return Slicing8(data, n, init);
}

#endif  // ZS_CRC32C_HW

}  // namespace crc32c_internal

uint32_t Crc32c(const void* data, size_t n, uint32_t init) {
  if (crc32c_internal::HardwareAvailable()) {
    return crc32c_internal::Hardware(data, n, init);
  }
  return crc32c_internal::Slicing8(data, n, init);
}

}  // namespace zeroshard
