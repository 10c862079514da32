#include "worker/engine/zero_plan.h"

#include <algorithm>

namespace zeroshard::engine {

std::vector<Range> GradientBuckets(uint64_t num_params, uint64_t bucket_size,
                                   uint32_t alignment) {
  const uint64_t s = (bucket_size + alignment - 1) / alignment * alignment;
  std::vector<Range> out;
  const uint64_t n = (num_params + s - 1) / s;
  for (uint64_t k = n; k-- > 0;) {
    out.push_back(Range{k * s, std::min((k + 1) * s, num_params)});
  }
  return out;
}

size_t FinalBuckets(const std::vector<Range>& buckets, size_t next,
                    uint64_t final_from) {
  while (next < buckets.size() && buckets[next].begin >= final_from) ++next;
  return next;
}

Range PartOf(const Range& r, int world, int rank, uint32_t alignment) {
  const Range p = AlignedPartRange(r.size(), static_cast<uint32_t>(world),
                                   static_cast<uint32_t>(rank), alignment);
  return Range{r.begin + p.begin, r.begin + p.end};
}

std::vector<ParamUnit> ParamUnits(const gpt2::ParamLayout& layout) {
  using Part = gpt2::GradSegment::Part;
  std::vector<ParamUnit> units;
  units.push_back({Part::kEmbeddings, -1, layout.EmbeddingRange()});
  for (int l = 0; l < layout.config().num_layers; ++l) {
    units.push_back({Part::kBlock, l, layout.LayerRange(l)});
  }
  units.push_back({Part::kFinalNorm, -1, layout.FinalNormRange()});
  return units;
}

bool IsPersistent(const ParamUnit& unit, uint64_t threshold) {
  return threshold > 0 && unit.range.size() <= threshold;
}

uint64_t PersistentElements(const gpt2::ParamLayout& layout,
                            uint64_t threshold) {
  uint64_t n = 0;
  for (const ParamUnit& u : ParamUnits(layout)) {
    if (IsPersistent(u, threshold)) n += u.range.size();
  }
  return n;
}

int UnitIndex(gpt2::GradSegment::Part part, int layer, int num_layers) {
  switch (part) {
    case gpt2::GradSegment::Part::kEmbeddings:
      return 0;
    case gpt2::GradSegment::Part::kBlock:
      return 1 + layer;
    case gpt2::GradSegment::Part::kFinalNorm:
      return num_layers + 1;
  }
  return 0;
}

std::vector<int> NeedSchedule(int num_layers) {
  const int emb = 0, fn = num_layers + 1;
  std::vector<int> s = {emb};
  for (int l = 0; l < num_layers; ++l) s.push_back(1 + l);
  s.insert(s.end(), {fn, emb, fn, emb});
  for (int l = num_layers - 1; l >= 0; --l) s.push_back(1 + l);
  return s;
}

}  // namespace zeroshard::engine
