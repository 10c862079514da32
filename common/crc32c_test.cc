#include "common/crc32c.h"

#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "common/crc32c_internal.h"
#include "gtest/gtest.h"

namespace zeroshard {
namespace {

using Fn = uint32_t (*)(const void*, size_t, uint32_t);

// All implementations, with the hardware one only where it can run.
std::vector<std::pair<std::string, Fn>> Implementations() {
  std::vector<std::pair<std::string, Fn>> impls = {
      {"Crc32c",
       [](const void* d, size_t n, uint32_t i) { return Crc32c(d, n, i); }},
      {"Crc32cScalar", [](const void* d, size_t n,
                          uint32_t i) { return Crc32cScalar(d, n, i); }},
      {"Slicing8", crc32c_internal::Slicing8},
  };
  if (crc32c_internal::HardwareAvailable()) {
    impls.push_back({"Hardware", crc32c_internal::Hardware});
  }
  return impls;
}

// Bit-at-a-time definition, independent of every table.
uint32_t BitwiseCrc32c(const uint8_t* p, size_t n) {
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k)
      crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

std::vector<uint8_t> RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TEST(Crc32cTest, KnownVectors) {
  std::printf("[ INFO     ] hardware crc32c: %s\n",
              crc32c_internal::HardwareAvailable() ? "yes" : "no");
  const std::string digits = "123456789";
  const std::vector<uint8_t> zeros(32, 0x00), ones(32, 0xFF);
  std::vector<uint8_t> ascending(32), descending(32);
  for (int i = 0; i < 32; ++i) {
    ascending[i] = static_cast<uint8_t>(i);
    descending[i] = static_cast<uint8_t>(31 - i);
  }
  for (const auto& [name, fn] : Implementations()) {
    SCOPED_TRACE(name);
    EXPECT_EQ(fn(digits.data(), digits.size(), 0), 0xE3069283u);
    // RFC 3720, B.4.
    EXPECT_EQ(fn(zeros.data(), zeros.size(), 0), 0x8A9136AAu);
    EXPECT_EQ(fn(ones.data(), ones.size(), 0), 0x62A8AB43u);
    EXPECT_EQ(fn(ascending.data(), ascending.size(), 0), 0x46DD794Eu);
    EXPECT_EQ(fn(descending.data(), descending.size(), 0), 0x113FDB5Cu);
    EXPECT_EQ(fn(nullptr, 0, 0), 0u);
    EXPECT_EQ(fn(nullptr, 0, 0x12345678u), 0x12345678u);
    EXPECT_EQ(fn("a", 1, 0), 0xC1D04330u);
  }
  EXPECT_EQ(Crc32c(digits.data(), digits.size()), 0xE3069283u);  // default init
}

TEST(Crc32cTest, Chaining) {
  const std::vector<uint8_t> data = RandomBytes(3 * 8192 * 2 + 777, 1);
  for (const auto& [name, fn] : Implementations()) {
    SCOPED_TRACE(name);
    const uint32_t whole = fn(data.data(), data.size(), 0);
    for (size_t split = 0; split <= data.size();
         split += (split < 300 ? 1 : 997)) {
      const uint32_t a = fn(data.data(), split, 0);
      ASSERT_EQ(fn(data.data() + split, data.size() - split, a), whole)
          << "split " << split;
    }
  }
}

TEST(Crc32cTest, AllImplementationsAgree) {
  constexpr size_t kMax = 3 * 8192 * 3 + 3 * 256 * 2 + 100;
  const std::vector<uint8_t> buf = RandomBytes(kMax + 64, 2);
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 1100; ++n) lengths.push_back(n);
  for (size_t n : std::initializer_list<size_t>{
           3 * 256 - 1, 3 * 256, 3 * 256 + 1, 3 * 8192 - 1, 3 * 8192,
           3 * 8192 + 1, 3 * 8192 + 3 * 256 + 13, 2 * 3 * 8192 + 5, 65536,
           kMax}) {
    lengths.push_back(n);
  }
  size_t checked = 0;
  const auto impls = Implementations();
  for (size_t n : lengths) {
    for (size_t align = 0; align < 16; ++align) {
      if (n > 1100 && align % 5 != 0) continue;  // keep it quick
      const uint8_t* p = buf.data() + align;
      const uint32_t init = static_cast<uint32_t>(n * 2654435761u);
      const uint32_t want = Crc32cScalar(p, n, init);
      for (const auto& [name, fn] : impls) {
        ASSERT_EQ(fn(p, n, init), want)
            << name << " n=" << n << " align=" << align;
        ++checked;
      }
      if (n <= 1100 && align == 0) {
        ASSERT_EQ(Crc32cScalar(p, n, 0), BitwiseCrc32c(p, n)) << n;
      }
    }
  }
  std::printf("[ INFO     ] %zu (implementation, length, alignment) checks\n",
              checked);
}

}  // namespace
}  // namespace zeroshard
