// Throughput of the fp32 <-> bf16/fp16 array conversions at every SimdLevel
// this CPU supports. GB/s counts bytes read plus bytes written (6 bytes per
// element), best of several runs over 64 MiB of fp32 (16 Mi elements).
// The last line is `RESULT ...` with the figures of the dispatched level.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "common/dtype.h"

namespace zeroshard {
namespace {

constexpr size_t kElements = size_t{16} << 20;  // 64 MiB of fp32
constexpr int kRuns = 7;

template <typename Fn>
double BestGbps(Fn fn) {
  double best = 1e30;
  fn();  // warm-up (page faults, caches)
  for (int r = 0; r < kRuns; ++r) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    const std::chrono::duration<double> dt =
        std::chrono::steady_clock::now() - start;
    best = std::min(best, dt.count());
  }
  return static_cast<double>(kElements) * (sizeof(float) + sizeof(uint16_t)) /
         best / 1e9;
}

struct Figures {
  double bf16_pack, bf16_unpack, fp16_pack, fp16_unpack;
};

int Main() {
  std::vector<float> f32(kElements), back(kElements);
  std::vector<uint16_t> h16(kElements);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (float& x : f32) x = dist(rng);
  std::fill(back.begin(), back.end(), 0.0f);
  std::fill(h16.begin(), h16.end(), 0);

  const SimdLevel best_level = DetectSimdLevel();
  std::printf(
      "dtype_bench: %zu elements (%zu MiB fp32), best of %d runs, "
      "GB/s = (bytes read + written) / s\n",
      kElements, kElements * sizeof(float) >> 20, kRuns);
  std::printf("detected level: %s\n", SimdLevelName(best_level));
  std::printf("%-8s %10s %12s %10s %12s\n", "level", "bf16_pack", "bf16_unpack",
              "fp16_pack", "fp16_unpack");
  Figures dispatched{};
  for (int l = 0; l <= static_cast<int>(best_level); ++l) {
    const SimdLevel level = static_cast<SimdLevel>(l);
    Figures fig;
    fig.bf16_pack = BestGbps(
        [&] { ConvertFp32ToBf16At(level, f32.data(), h16.data(), kElements); });
    fig.bf16_unpack = BestGbps([&] {
      ConvertBf16ToFp32At(level, h16.data(), back.data(), kElements);
    });
    fig.fp16_pack = BestGbps(
        [&] { ConvertFp32ToFp16At(level, f32.data(), h16.data(), kElements); });
    fig.fp16_unpack = BestGbps([&] {
      ConvertFp16ToFp32At(level, h16.data(), back.data(), kElements);
    });
    std::printf("%-8s %10.2f %12.2f %10.2f %12.2f\n", SimdLevelName(level),
                fig.bf16_pack, fig.bf16_unpack, fig.fp16_pack, fig.fp16_unpack);
    if (level == best_level) dispatched = fig;
  }
  std::printf(
      "RESULT bf16_pack_gbps=%.2f bf16_unpack_gbps=%.2f "
      "fp16_pack_gbps=%.2f fp16_unpack_gbps=%.2f\n",
      dispatched.bf16_pack, dispatched.bf16_unpack, dispatched.fp16_pack,
      dispatched.fp16_unpack);
  return 0;
}

}  // namespace
}  // namespace zeroshard

int main() { return zeroshard::Main(); }
