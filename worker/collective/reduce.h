// The canonical reduction order of the collectives layer. Pure functions,
// thread-safe.
//
// The sum over W contributions x_0..x_{W-1} (rank order) is the pairwise
// tree
//   T(x_lo..x_hi) = x_lo                               if hi == lo
//                 = T(x_lo..x_{lo+p-1}) + T(x_{lo+p}..x_hi)  otherwise,
// where p is the largest power of two strictly below the count n = hi-lo+1.
//   W=2: r0+r1   W=3: (r0+r1)+r2   W=4: (r0+r1)+(r2+r3)
//   W=6: ((r0+r1)+(r2+r3))+(r4+r5)
// Every addition is an fp32 addition (no FMA, no reassociation).
//
// Why this tree: for M nodes of G local ranks (rank = node·G + local) with G
// a power of two, T over all W ranks equals T over the M node sums, each of
// which is T over the node's G ranks. So the hierarchical composition
// (reduce inside the node, then across nodes) gives the same bits as the
// flat one. For G not a power of two the two differ (both stay
// deterministic).
//
// bf16: contributions are widened to fp32 (exact), summed in fp32 by the
// tree and rounded to bf16 once at the end (nearest even, dtype.h). The
// hierarchical composition therefore keeps its intermediate node sums in
// fp32.
#ifndef ZEROSHARD_WORKER_COLLECTIVE_REDUCE_H_
#define ZEROSHARD_WORKER_COLLECTIVE_REDUCE_H_

#include <cstddef>

#include "worker/collective/collective.h"

namespace zeroshard {
namespace collective {

// Largest power of two strictly below n; requires n >= 2.
int TreeSplit(int n);

// out[j] = T(inputs[0][j], ..., inputs[n-1][j]) for j < count, inputs of
// `in` dtype, the fp32 sum converted to `out_dtype` (rounded once if bf16).
// n >= 1. `out` may be one of the inputs (same start); otherwise it must not
// overlap them.
void ReduceTree(const void* const* inputs, int n, DType in, void* out,
                DType out_dtype, size_t count);

}  // namespace collective
}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_COLLECTIVE_REDUCE_H_
