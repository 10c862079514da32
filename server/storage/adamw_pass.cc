#include "server/storage/adamw_pass.h"

#include <algorithm>

#include "common/dtype.h"

namespace zeroshard {
namespace storage {
namespace {
constexpr uint64_t kTile = 1 << 16;  // elements per thread-pool work item
}  // namespace

void AdamWWindow(const TierLayout& layout,
                 const std::vector<AdamWHyper>& hypers, uint64_t begin,
                 uint64_t end, float* p, const float* g, float* m, float* v,
                 uint16_t* serve, ThreadPool* pool) {
  struct Tile {
    uint64_t begin, end;
    uint32_t group;
  };
  std::vector<Tile> tiles;
  for (const GroupSpan& s : layout.groups) {
    const uint64_t b = std::max(s.begin, begin);
    const uint64_t e = std::min(s.end, end);
    for (uint64_t t = b; t < e; t += kTile) {
      tiles.push_back(Tile{t - begin, std::min(e, t + kTile) - begin, s.group});
    }
  }
  auto run = [&](size_t i) {
    const Tile& t = tiles[i];
    AdamWStep(hypers[t.group], p + t.begin, g + t.begin, m + t.begin,
              v + t.begin, serve + t.begin, layout.serving, t.end - t.begin);
  };
  if (pool == nullptr) {
    for (size_t i = 0; i < tiles.size(); ++i) run(i);
  } else {
    pool->ParallelFor(tiles.size(), run);
  }
}

void ConvertServing(ServingType type, const float* p, uint16_t* serve,
                    uint64_t n) {
  if (type == ServingType::kFp16) {
    ConvertFp32ToFp16(p, serve, n);
  } else {
    ConvertFp32ToBf16(p, serve, n);
  }
}

}  // namespace storage
}  // namespace zeroshard
