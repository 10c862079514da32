// Internal to //common:crc32c: the individual implementations behind
// Crc32c(), exposed for tests and benchmarks. Same contract as crc32c.h.
#ifndef ZEROSHARD_COMMON_CRC32C_INTERNAL_H_
#define ZEROSHARD_COMMON_CRC32C_INTERNAL_H_

#include <cstddef>
#include <cstdint>

namespace zeroshard {
namespace crc32c_internal {

// True if this build and CPU can run Hardware() (x86-64 with SSE4.2).
bool HardwareAvailable();

// SSE4.2 implementation; must only be called if HardwareAvailable().
uint32_t Hardware(const void* data, size_t n, uint32_t init);

// Portable slicing-by-8 implementation.
uint32_t Slicing8(const void* data, size_t n, uint32_t init);

}  // namespace crc32c_internal
}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_CRC32C_INTERNAL_H_
