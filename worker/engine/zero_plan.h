// The fixed geometry of the ZeRO engine: gradient buckets, parts, and which
// parameter units are persistent. Pure functions of the layout and the
// options; thread-safe.
//
// Gradient buckets split the flat space [0, Ψ) at multiples of S, the bucket
// size rounded up to the part alignment A: bucket k = [k·S, min((k+1)·S, Ψ)).
// They are reduced in backward order (highest k first), and rank r owns
// part r of every bucket: begin + AlignedPartRange(size, W, r, A). Since S
// is a multiple of A, every part starts on a multiple of A, so a part is a
// valid contribution for servers whose plan uses alignment A. Boundaries
// depend on Ψ, S and A only: equal for every stage and server count.
//
// Parameter units (stage 3) are the model's (model.h). Rank r keeps part r
// of each unit, except that a persistent unit (at most
// stage3_param_persistence_threshold elements) is kept whole on every rank.
#ifndef ZEROSHARD_WORKER_ENGINE_ZERO_PLAN_H_
#define ZEROSHARD_WORKER_ENGINE_ZERO_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/partition.h"
#include "worker/engine/model.h"

namespace zeroshard::engine {

// Buckets in reduction order (descending flat ranges). Requires
// bucket_size >= 1, alignment >= 1.
std::vector<Range> GradientBuckets(uint64_t num_params, uint64_t bucket_size,
                                   uint32_t alignment);

// Backward announced that every gradient at or above `final_from` is final:
// the end of the run of `buckets` (GradientBuckets order) from `next` on
// that are complete now.
size_t FinalBuckets(const std::vector<Range>& buckets, size_t next,
                    uint64_t final_from);

// Stages 1-2's parameter all-gather buckets (DeepSpeed's
// allgather_bucket_size): runs of consecutive units, each unit joining the
// run before it when it starts where that run ends and the run stays
// within `bucket_size` elements; a unit larger than `bucket_size` is a
// bucket of its own (bucket_size 0 or 1: one bucket per unit).
// (*bucket_of)[u] is unit u's bucket. Every bucket is all-gathered whole,
// so its parts (PartOf) are one range per rank.
std::vector<Range> GatherBuckets(const std::vector<Range>& units,
                                 uint64_t bucket_size,
                                 std::vector<int>* bucket_of);

// Part `rank` of `r` split over `world` ranks (flat coordinates).
Range PartOf(const Range& r, int world, int rank, uint32_t alignment);

// Whether `unit` is persistent under `threshold` (elements; 0: none is).
// DeepSpeed's rule (numel <= threshold), applied to whole units rather than
// to single tensors.
bool IsPersistent(const Range& unit, uint64_t threshold);

// Elements of the persistent units of `layout` (Ψp).
uint64_t PersistentElements(const ModelLayout& layout, uint64_t threshold);

}  // namespace zeroshard::engine

#endif  // ZEROSHARD_WORKER_ENGINE_ZERO_PLAN_H_
