// Fused CPU AdamW step for shard servers.
//
// A shard server keeps fp32 master weights `p`, the AdamW moments `m` and `v`
// and, optionally, a 16-bit serving copy of the weights that workers fetch.
// AdamWStep() updates all of them in one pass over memory (read p, g, m, v;
// write p, m, v and the serving copy: 30 bytes per element with a 16-bit copy).
//
// Math (per element; identical to torch.optim.AdamW in torch 1.13,
// `_single_tensor_adamw`, non-amsgrad, non-maximize, including the order of
// float32 roundings of its AVX2 kernels):
//
//   g   = g_in * grad_scale
//   p   = p * float(1 - lr * weight_decay)
//   m   = fma(g, float(1 - beta1), m * beta1)          // exp_avg.mul_().add_()
//   v   = fma(float(1 - beta2) * g, g, v * beta2)      // .mul_().addcmul_()
//   den = sqrt(v) / float(sqrt(1 - beta2^t)) + eps
//   p   = p + (float(-lr / (1 - beta1^t)) * m) / den   // param.addcdiv_()
//
// With bias_correction false (DeepSpeed's Adam option) both 1 - beta^t are
// taken as 1. The scalars in float(...) are computed once per call in
// double, as Python
// does for torch. Every NaN written to p, m or v is the canonical quiet NaN
// 0x7FC00000, so that results (payload bits included) do not depend on which
// NaN operand an instruction happened to propagate.
//
// Determinism: the scalar, AVX2 and AVX-512 paths produce bit-identical
// results for every input (same operations in the same order, FMA exactly
// where the scalar path calls std::fma; sqrt and division are exact in IEEE
// arithmetic). SIMD code is compiled with function target attributes and
// selected at run time, so the library builds and runs on any x86-64 CPU.

#ifndef ZEROSHARD_COMMON_OPTIM_ADAMW_H_
#define ZEROSHARD_COMMON_OPTIM_ADAMW_H_

#include <cstddef>
#include <cstdint>

#include "common/dtype.h"

namespace zeroshard {

// Format of the serving copy that AdamWStep() writes next to the fp32 master.
enum class ServingType { kNone, kBf16, kFp16 };

struct AdamWHyper {
  // Doubles, as Python holds them for torch: the per-call scalars below
  // are computed from them in double and only then rounded to float.
  double lr;  // this step's learning rate
  double beta1, beta2, eps, weight_decay;
  // Gradients are multiplied by this first (clip coefficient, 1/loss_scale);
  // 1 = none.
  float grad_scale;
  int64_t step;  // t >= 1, for bias correction
  // false: DeepSpeed's Adam with "bias_correction": false, where the
  // formula's 1 - beta1^t and 1 - beta2^t are 1.
  bool bias_correction = true;
};

// The float scalars of the formula above, computed once per call from `h`
// in double and then rounded to float, as torch receives them from Python.
// A device kernel given these and the same operations in the same order
// (FMA where std::fma appears) computes AdamWStep's bits
// (worker/gpt2/cuda/cuda_optim.cu).
struct AdamWScalars {
  float scale;          // grad_scale
  float decay;          // 1 - lr * weight_decay
  float beta1;          // exp_avg.mul_(beta1)
  float one_m_beta1;    // .add_(grad, alpha=1 - beta1)
  float beta2;          // exp_avg_sq.mul_(beta2)
  float one_m_beta2;    // .addcmul_(grad, grad, value=1 - beta2)
  float bc2_sqrt;       // sqrt(1 - beta2^t)
  float eps;            //
  float neg_step_size;  // -lr / (1 - beta1^t)
};
AdamWScalars MakeAdamWScalars(const AdamWHyper& h);

// One fused AdamW step over n elements: reads p, g, m, v; writes p, m, v and,
// unless st is kNone, `serve`: serve[i] = Fp32ToBf16(p[i]) or
// Fp32ToFp16(p[i]) of the new p[i] (common/dtype.h), bit for bit on every
// path. g is only read; serve may be null when st is kNone. No allocation;
// pointers may have any (element) alignment. Pure and thread-safe on disjoint
// ranges, so callers parallelize by splitting [0, n) into tiles (keep tile
// starts at multiples of 64 elements for aligned vectors). Uses the code path
// for DetectSimdLevel().
void AdamWStep(const AdamWHyper& h, float* p, const float* g, float* m,
               float* v, uint16_t* serve, ServingType st, size_t n);

// Same as AdamWStep() but forcing the code path for `level` (tests,
// benchmarks): kScalar is portable C++, kAvx2 uses AVX2 + FMA + F16C, kAvx512
// uses AVX-512 F/BW/VL/DQ (see SimdLevel). Returns false, touching nothing, if
// `level` is above DetectSimdLevel() or not a valid SimdLevel.
bool AdamWStepAt(SimdLevel level, const AdamWHyper& h, float* p, const float* g,
                 float* m, float* v, uint16_t* serve, ServingType st, size_t n);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_OPTIM_ADAMW_H_
