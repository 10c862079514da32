// Counter-based random numbers: a value depends only on (seed, index), never
// on how work is split between threads, servers or ranks, so seeded
// initialisation and test data are the same whatever the placement.
// Header-only, pure, thread-safe.
#ifndef ZEROSHARD_COMMON_SEEDED_RANDOM_H_
#define ZEROSHARD_COMMON_SEEDED_RANDOM_H_

#include <cmath>
#include <cstdint>

namespace zeroshard {

// splitmix64's output function of x + golden ratio: a well-mixed 64-bit
// value per input.
inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A standard normal value by Box-Muller from two random 64-bit words (their
// top 53 bits become uniforms u1 in (0, 1] and u2 in [0, 1)).
inline double BoxMullerNormal(uint64_t a, uint64_t b) {
  const double u1 = (static_cast<double>(a >> 11) + 1.0) * 0x1.0p-53;
  const double u2 = static_cast<double>(b >> 11) * 0x1.0p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_SEEDED_RANDOM_H_
