// Test helpers shared by the tier tests and the benchmark: a layout with two
// parameter groups and a gap, deterministic data, whole-state snapshots.
#ifndef ZEROSHARD_SERVER_STORAGE_TIER_TEST_UTIL_H_
#define ZEROSHARD_SERVER_STORAGE_TIER_TEST_UTIL_H_

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "server/storage/tier.h"

namespace zeroshard {
namespace storage {

// Two groups over different sub-ranges with a gap left untouched by Step:
// [0, 40%) group 0, [42%, 80%) group 1, [80%, n) group 0.
inline TierLayout TwoGroupLayout(uint64_t n) {
  TierLayout l;
  l.size = n;
  l.serving = ServingType::kBf16;
  l.groups = {
      {0, n * 4 / 10, 0}, {n * 42 / 100, n * 8 / 10, 1}, {n * 8 / 10, n, 0}};
  return l;
}

inline std::vector<AdamWHyper> TwoGroupHypers(int64_t step) {
  AdamWHyper a{
      1e-3f * static_cast<float>(step), 0.9f, 0.999f, 1e-8f, 0.01f, 0.5f, step};
  AdamWHyper b{3e-4f, 0.8f, 0.99f, 1e-6f, 0.0f, 0.5f, step};
  return {a, b};
}

inline std::vector<float> RandomFloats(uint64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Writes `data` into [0, n) in pieces of `piece` elements with `fn`.
template <typename Fn>
absl::Status InPieces(uint64_t n, uint64_t piece, Fn fn) {
  for (uint64_t b = 0; b < n; b += piece) {
    const uint64_t len = b + piece < n ? piece : n - b;
    absl::Status s = fn(b, len);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

struct TierState {
  std::vector<float> p, m, v, g;
  std::vector<uint16_t> serve;
  uint64_t step = 0;
  bool operator==(const TierState& o) const {
    auto same = [](const auto& a, const auto& b) {
      return a.size() == b.size() &&
             std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0;
    };
    return same(p, o.p) && same(m, o.m) && same(v, o.v) && same(g, o.g) &&
           same(serve, o.serve) && step == o.step;
  }
};

inline absl::Status ReadState(StorageTier* t, TierState* s) {
  const uint64_t n = t->layout().size;
  s->p.resize(n);
  s->m.resize(n);
  s->v.resize(n);
  s->g.resize(n);
  s->serve.resize(n);
  absl::Status st = t->ReadMaster(0, n, s->p.data());
  if (st.ok()) st = t->ReadMoments(0, n, s->m.data(), s->v.data());
  if (st.ok()) st = t->ReadGrad(0, n, s->g.data());
  if (st.ok()) st = t->ReadServing(0, n, s->serve.data(), &s->step);
  return st;
}

}  // namespace storage
}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_STORAGE_TIER_TEST_UTIL_H_
