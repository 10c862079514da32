// CRC-32C (Castagnoli polynomial 0x1EDC6F41, reflected 0x82F63B78), the
// checksum of iSCSI (RFC 3720), ext4, LevelDB and absl::ComputeCrc32c:
// initial register ~0, reflected input/output, final xor ~0. So
// Crc32c("123456789", 9) == 0xE3069283 and Crc32c(anything, 0) == 0.
//
// `init` is a previous result, which makes the checksum chain:
//   Crc32c(b, nb, Crc32c(a, na)) == Crc32c(a followed by b, na + nb).
//
// All functions are pure and thread-safe; `data` may be null when n == 0
// and needs no particular alignment.
#ifndef ZEROSHARD_COMMON_CRC32C_H_
#define ZEROSHARD_COMMON_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace zeroshard {

// Fastest available implementation: SSE4.2 crc32 instructions (three
// interleaved streams) when the CPU has them, detected at run time, else
// slicing-by-8 tables. Never requires SSE4.2 at build time.
uint32_t Crc32c(const void* data, size_t n, uint32_t init = 0);

// Byte-at-a-time table-driven reference (slow; for tests).
uint32_t Crc32cScalar(const void* data, size_t n, uint32_t init = 0);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_CRC32C_H_
