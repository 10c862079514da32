#include "worker/gpt2/cuda/causal_plan.h"

#include <algorithm>

namespace zeroshard::gpt2 {

std::vector<CausalBlock> CausalBlocks(int T, int blocks, int align) {
  std::vector<CausalBlock> out;
  if (T <= 0) return out;
  if (blocks <= 1 || align < 1 || T <= align) return {{0, T}};
  int begin = 0;
  for (int i = 1; i <= blocks && begin < T; ++i) {
    // The i-th equal cut, rounded to the nearest multiple of align.
    const long long cut = static_cast<long long>(T) * i / blocks;
    int end =
        i == blocks ? T : static_cast<int>((cut + align / 2) / align * align);
    end = std::min(end, T);
    if (end <= begin) continue;
    out.push_back({begin, end});
    begin = end;
  }
  if (begin < T) out.push_back({begin, T});
  return out;
}

int CausalBlockCount(int T, int requested) {
  if (requested > 0) return requested;
  // Blocks of about 256 rows, at most 8: each product stays one large
  // batched call per block (more, smaller calls ran slower on an H200).
  return std::clamp(T / 256, 1, 8);
}

BlockGemm PlanBlock(AttentionProduct p, CausalBlock block, int T, int hs) {
  const int r0 = block.begin, r1 = block.end, rows = r1 - r0;
  BlockGemm g;
  switch (p) {
    case AttentionProduct::kScores:      // Q[r0:r1] K[0:r1]^T
    case AttentionProduct::kScoresGrad:  // dY[r0:r1] V[0:r1]^T
      g.trans_b = true;
      g.M = rows, g.N = r1, g.K = hs;
      g.a_row = r0;
      g.c_row = r0;
      break;
    case AttentionProduct::kValues:     // P[r0:r1, 0:r1] V[0:r1]
    case AttentionProduct::kQueryGrad:  // dS[r0:r1, 0:r1] K[0:r1]
      g.M = rows, g.N = hs, g.K = r1;
      g.a_row = r0;
      g.c_row = r0;
      break;
    case AttentionProduct::kValuesGrad:  // P[r0:T, r0:r1]^T dY[r0:T]
    case AttentionProduct::kKeyGrad:     // dS[r0:T, r0:r1]^T Q[r0:T]
      g.trans_a = true;
      g.M = rows, g.N = hs, g.K = T - r0;
      g.a_row = r0, g.a_col = r0;
      g.b_row = r0;
      g.c_row = r0;
      break;
  }
  return g;
}

}  // namespace zeroshard::gpt2
