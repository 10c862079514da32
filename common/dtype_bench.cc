// Throughput of the fp32 <-> bf16/fp16 array conversions at every SimdLevel
// this CPU supports, over 64 MiB of fp32 (16 Mi elements). For each
// conversion the levels run alternately (common/bench/bench.h), one warm-up
// round then --rounds timed ones, and each is compared with the scalar
// level of the same run. GB/s counts bytes read plus bytes written (6 bytes
// per element) of the median run. Correctness in the same run: every
// level's output equals the scalar level's bit for bit (CRC-32C of the
// whole output).
//
//   bazel run -c opt //common:dtype_bench -- [--rounds=7]
//
// RESULT bf16_pack_gbps=.. bf16_unpack_gbps=.. fp16_pack_gbps=..
//        fp16_unpack_gbps=.. (the dispatched level's figures)
//        bf16_pack_vs_scalar=.. ... (its speed / the scalar level's)
//        correct=<1: every level gave the scalar bits>
#include <cstdio>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/bench/bench.h"
#include "common/crc32c.h"
#include "common/dtype.h"
#include "common/flags.h"

namespace zeroshard {
namespace {

constexpr size_t kElements = size_t{16} << 20;  // 64 MiB of fp32

struct Buffers {
  std::vector<float> f32, back;
  std::vector<uint16_t> h16;
};

// One conversion at a forced level, between the buffers; each unpack
// follows its pack in kConversions.
struct Conversion {
  const char* name;
  bool pack;  // fp32 -> 16 bits (else 16 bits -> fp32, from h16)
  bool (*at)(SimdLevel, Buffers*);
};

const Conversion kConversions[] = {
    {"bf16_pack", true,
     [](SimdLevel l, Buffers* b) {
       return ConvertFp32ToBf16At(l, b->f32.data(), b->h16.data(), kElements);
     }},
    {"bf16_unpack", false,
     [](SimdLevel l, Buffers* b) {
       return ConvertBf16ToFp32At(l, b->h16.data(), b->back.data(), kElements);
     }},
    {"fp16_pack", true,
     [](SimdLevel l, Buffers* b) {
       return ConvertFp32ToFp16At(l, b->f32.data(), b->h16.data(), kElements);
     }},
    {"fp16_unpack", false,
     [](SimdLevel l, Buffers* b) {
       return ConvertFp16ToFp32At(l, b->h16.data(), b->back.data(), kElements);
     }},
};

absl::Status Convert(const Conversion& c, SimdLevel level, Buffers* b) {
  if (c.at(level, b)) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(c.name, ": level ", SimdLevelName(level), " refused"));
}

uint32_t OutputCrc(const Conversion& c, const Buffers& b) {
  return c.pack ? Crc32c(b.h16.data(), kElements * sizeof(uint16_t))
                : Crc32c(b.back.data(), kElements * sizeof(float));
}

int Main(int argc, char** argv) {
  int64_t rounds = 7;
  FlagSet flags("dtype_bench",
                "dtype_bench [flags]\n\nfp32 <-> bf16/fp16 conversion GB/s "
                "per SIMD level, against the scalar level.");
  flags.Int64("rounds", &rounds, "timed runs of every level (medians)");
  flags.ParseOrExit(argc, argv);
  if (rounds < 1) ExitWithError(flags.program(), "--rounds must be >= 1");

  Buffers b;
  b.f32.resize(kElements);
  b.back.assign(kElements, 0.0f);
  b.h16.assign(kElements, 0);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (float& x : b.f32) x = dist(rng);

  const SimdLevel best_level = DetectSimdLevel();
  const double gb =
      static_cast<double>(kElements) * (sizeof(float) + sizeof(uint16_t)) / 1e9;
  std::printf(
      "dtype_bench: %zu elements (%zu MiB fp32), levels alternated, median "
      "of %lld runs after 1 warm-up, GB/s = (bytes read + written) / s; "
      "detected level: %s\n",
      kElements, kElements * sizeof(float) >> 20,
      static_cast<long long>(rounds), SimdLevelName(best_level));
  bench::ResultLine gbps, vs_scalar;
  bool ok = true;
  for (size_t ci = 0; ci < std::size(kConversions); ++ci) {
    const Conversion& c = kConversions[ci];
    // An unpack reads the 16-bit values of its pack (the entry before it).
    if (!c.pack && !kConversions[ci - 1].at(SimdLevel::kScalar, &b)) return 1;
    std::vector<bench::Variant> variants;
    for (int l = 0; l <= static_cast<int>(best_level); ++l) {
      const SimdLevel level = static_cast<SimdLevel>(l);
      variants.push_back({SimdLevelName(level), bench::Timed([&c, level, &b] {
                            return Convert(c, level, &b);
                          }),
                          /*reference=*/level == SimdLevel::kScalar, gb});
    }
    auto r = bench::RunAlternating(
        variants, bench::Schedule{1, static_cast<int>(rounds)});
    if (!r.ok()) {
      std::fprintf(stderr, "dtype_bench: %s\n", r.status().ToString().c_str());
      return 1;
    }
    std::printf("\n%s:\n%s", c.name, r->Table("GB/s").c_str());
    // Every level once more, its whole output against the scalar level's.
    uint32_t scalar_crc = 0;
    std::string differ;
    for (int l = 0; l <= static_cast<int>(best_level); ++l) {
      const SimdLevel level = static_cast<SimdLevel>(l);
      if (!Convert(c, level, &b).ok()) return 1;
      const uint32_t crc = OutputCrc(c, b);
      if (level == SimdLevel::kScalar) scalar_crc = crc;
      if (crc != scalar_crc)
        absl::StrAppend(&differ, " ", SimdLevelName(level));
    }
    std::printf("check: every level's output == the scalar level's: %s%s\n",
                differ.empty() ? "yes" : "NO, differs at", differ.c_str());
    ok &= differ.empty();
    const std::string best_name = SimdLevelName(best_level);
    gbps.Add(absl::StrCat(c.name, "_gbps"), r->Get(best_name).rate());
    vs_scalar.Add(absl::StrCat(c.name, "_vs_scalar"),
                  r->SpeedVsReference(best_name));
  }
  gbps.Append(vs_scalar).AddInt("correct", ok ? 1 : 0).Print();
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace zeroshard

int main(int argc, char** argv) { return zeroshard::Main(argc, argv); }
