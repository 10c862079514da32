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

std::vector<Range> GatherBuckets(const std::vector<Range>& units,
                                 uint64_t bucket_size,
                                 std::vector<int>* bucket_of) {
  std::vector<Range> out;
  bucket_of->assign(units.size(), -1);
  for (size_t u = 0; u < units.size(); ++u) {
    const Range& r = units[u];
    if (!out.empty() && out.back().end == r.begin &&
        out.back().size() + r.size() <= bucket_size) {
      out.back().end = r.end;
    } else {
      out.push_back(r);
    }
    (*bucket_of)[u] = static_cast<int>(out.size()) - 1;
  }
  return out;
}

Range PartOf(const Range& r, int world, int rank, uint32_t alignment) {
  const Range p = AlignedPartRange(r.size(), static_cast<uint32_t>(world),
                                   static_cast<uint32_t>(rank), alignment);
  return Range{r.begin + p.begin, r.begin + p.end};
}

bool IsPersistent(const Range& unit, uint64_t threshold) {
  return threshold > 0 && unit.size() <= threshold;
}

uint64_t PersistentElements(const ModelLayout& layout, uint64_t threshold) {
  uint64_t n = 0;
  for (const Range& u : layout.units) {
    if (IsPersistent(u, threshold)) n += u.size();
  }
  return n;
}

}  // namespace zeroshard::engine
