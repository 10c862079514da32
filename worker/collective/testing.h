// Test helpers shared by the in-process and multi-process collective tests:
// deterministic inputs and an independent scalar reference of the canonical
// reduction order (reduce.h).
#ifndef ZEROSHARD_WORKER_COLLECTIVE_TESTING_H_
#define ZEROSHARD_WORKER_COLLECTIVE_TESTING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "worker/collective/collective.h"

namespace zeroshard {
namespace collective {

// Rank `rank`'s input: `count` elements of `dtype` (raw bytes), values of
// both signs over ~2^-12..2^12, so that the summation order shows in the
// bits. Depends only on (seed, rank, index).
std::vector<char> MakeInput(uint64_t seed, int rank, uint64_t count,
                            DType dtype);

// The sum over inputs (rank order) element by element: scalar fp32, the tree
// of reduce.h, bf16 rounded once. With local_size G (1 < G < W): the tree
// over node sums of trees over the node's ranks (what the hierarchical
// algorithm computes for any G).
std::vector<char> ReferenceSum(const std::vector<std::vector<char>>& inputs,
                               DType dtype, int local_size = 1);

// The same with a left-to-right sum (((r0+r1)+r2)+...), to show the tests
// can tell orders apart.
std::vector<char> SequentialSum(const std::vector<std::vector<char>>& inputs,
                                DType dtype);

// FNV-1a of bytes, for checksums in logs.
uint64_t Fnv1a(const void* data, size_t bytes);

}  // namespace collective
}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_COLLECTIVE_TESTING_H_
