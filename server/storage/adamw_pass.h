// The optimizer arithmetic both tiers share, so that they cannot diverge:
// AdamW over the spans of a window of elements, split into tiles run on a
// thread pool, and the serving-copy conversion.
//
// Pure functions over caller-owned memory; thread-safe for disjoint windows.
#ifndef ZEROSHARD_SERVER_STORAGE_ADAMW_PASS_H_
#define ZEROSHARD_SERVER_STORAGE_ADAMW_PASS_H_

#include <cstdint>
#include <vector>

#include "common/optim/adamw.h"
#include "common/thread_pool.h"
#include "server/storage/tier.h"

namespace zeroshard {
namespace storage {

// Runs AdamWStep over every element of [begin, end) that lies in a span of
// `layout`, with hypers[span.group]. The arrays hold the window: p[0] is
// element `begin`. Elements outside the spans are not touched. `pool` may be
// null (runs on the caller).
void AdamWWindow(const TierLayout& layout,
                 const std::vector<AdamWHyper>& hypers, uint64_t begin,
                 uint64_t end, float* p, const float* g, float* m, float* v,
                 uint16_t* serve, ThreadPool* pool);

// serve[i] = 16-bit form of p[i] for i in [0, n).
void ConvertServing(ServingType type, const float* p, uint16_t* serve,
                    uint64_t n);

}  // namespace storage
}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_STORAGE_ADAMW_PASS_H_
