// Causal attention's products in query blocks: which part of each product
// a causal mask leaves to compute. Pure functions, no CUDA; CudaKernels
// (cuda_gemm.cc) turns each block into one strided-batched cuBLAS call.
//
// Per head, row-major: Q, K, V, Y, dY, dQ, dK, dV are (T,hs); S, P, dP, dS
// are (T,T). Query t sees keys [0, t]; P and dS are 0 above the diagonal.
// Cut the rows into blocks [r0, r1):
//
//   product   block                               M        N     K
//   S  = Q K^T   S[r0:r1, 0:r1]  = Q[r0:r1] K[0:r1]^T   r1-r0    r1    hs
//   Y  = P V     Y[r0:r1]        = P[r0:r1, 0:r1] V[0:r1]  r1-r0  hs    r1
//   dP = dY V^T  dP[r0:r1, 0:r1] = dY[r0:r1] V[0:r1]^T  r1-r0    r1    hs
//   dV = P^T dY  dV[r0:r1] = P[r0:T, r0:r1]^T dY[r0:T]  r1-r0    hs  T-r0
//   dQ = dS K    dQ[r0:r1] = dS[r0:r1, 0:r1] K[0:r1]    r1-r0    hs    r1
//   dK = dS^T Q  dK[r0:r1] = dS[r0:T, r0:r1]^T Q[r0:T]  r1-r0    hs  T-r0
//
// so with n equal blocks the products do (n+1)/(2n) of the unmasked work.
// Entries of S and dP right of column r1 are not written: the causal
// softmax reads [0, t] only and writes every column of P and dS (0 above
// the diagonal), which is all the later products read.
#ifndef ZEROSHARD_WORKER_GPT2_CUDA_CAUSAL_PLAN_H_
#define ZEROSHARD_WORKER_GPT2_CUDA_CAUSAL_PLAN_H_

#include <vector>

namespace zeroshard::gpt2 {

// Row block [begin, end) of the T positions.
struct CausalBlock {
  int begin = 0;
  int end = 0;
};

// At most `blocks` row blocks covering [0, T) in order, every boundary but T
// a multiple of `align` (so that an fp32 block starts 4 * align bytes
// apart), as equal as that allows; fewer where T is short. blocks <= 1,
// align < 1 or T <= align: one block [0, T). Empty for T <= 0.
std::vector<CausalBlock> CausalBlocks(int T, int blocks, int align);

// The blocks CudaKernels uses for sequence length T when the option asks
// for `requested` (0: chosen from T).
int CausalBlockCount(int T, int requested);

enum class AttentionProduct {
  kScores,      // S = Q K^T (scaled)
  kValues,      // Y = P V
  kScoresGrad,  // dP = dY V^T
  kValuesGrad,  // dV = P^T dY
  kQueryGrad,   // dQ = dS K (scaled)
  kKeyGrad,     // dK = dS^T Q (scaled)
};

// One block of a product: row-major C(M,N) = op(A)(M,K) op(B)(K,N), with
// op(A) = A^T if trans_a (likewise B). The block of A starts at stored row
// a_row, column a_col of A (likewise B); C's rows start at c_row, column 0.
struct BlockGemm {
  bool trans_a = false;
  bool trans_b = false;
  int M = 0, N = 0, K = 0;
  int a_row = 0, a_col = 0;
  int b_row = 0, b_col = 0;
  int c_row = 0;
};

// The product `p` restricted to row block `block` of T positions (the
// table above); hs is the head size.
BlockGemm PlanBlock(AttentionProduct p, CausalBlock block, int T, int hs);

}  // namespace zeroshard::gpt2

#endif  // ZEROSHARD_WORKER_GPT2_CUDA_CAUSAL_PLAN_H_
