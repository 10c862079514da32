// Vectorised row primitives for the CPU kernels (cpu_kernels.h): the loops
// that are not matrix products. One table of functions per instruction set:
// portable C++ (vec_scalar.cc) and AVX2 + FMA (vec_avx2.cc, compiled with a
// target pragma and only called when the CPU has AVX2). Vec() picks the best
// at first use.
//
// Determinism: within one table, every element is computed by the same
// instructions wherever it lies in the array (AVX2 tails use masked loads
// and stores, not a scalar loop), and reductions run in a fixed order, so
// results depend only on the values and the length, never on the address.
// The two tables agree to a few ulp (exp/tanh are polynomial in AVX2, libm
// in the scalar table), not bit for bit.
//
// All functions are pure and thread-safe; n, C >= 1 unless stated.
#ifndef ZEROSHARD_WORKER_GPT2_VEC_H_
#define ZEROSHARD_WORKER_GPT2_VEC_H_

#include <cstdint>

namespace zeroshard::gpt2 {

inline constexpr float kLayernormEps = 1e-5f;
// GELU's tanh approximation: sqrt(2/pi) and the cubic coefficient.
inline constexpr float kGeluScale = 0.7978845608028654f;
inline constexpr float kGeluCubic = 0.044715f;

struct VecOps {
  const char* name;  // "scalar", "avx2"
  // out = a + b (out may alias a or b).
  void (*add)(float* out, const float* a, const float* b, int64_t n);
  // y += x.
  void (*acc)(float* y, const float* x, int64_t n);
  // x *= s.
  void (*scale)(float* x, float s, int64_t n);
  // max of x (n >= 1).
  float (*max)(const float* x, int64_t n);
  // Returns sum exp(x - m); writes out = exp(x - m) unless out is null (out
  // may alias x).
  float (*exp_sum)(float* out, const float* x, float m, int64_t n);
  // Softmax backward: ds = p * (dp - dot(p, dp)) (ds may alias dp).
  void (*softmax_backward)(float* ds, const float* p, const float* dp,
                           int64_t n);
  // GELU (tanh approximation) and its backward (see kernels.h).
  void (*gelu_forward)(float* out, const float* x, int64_t n);
  void (*gelu_backward)(float* dinp, const float* x, const float* dout,
                        int64_t n);
  // One LayerNorm row (C): out = (x - mean) * rstd * w + b, eps 1e-5.
  void (*layernorm_forward)(float* out, float* mean, float* rstd,
                            const float* x, const float* w, const float* b,
                            int C);
  // One LayerNorm row backward: dinp += ..., dw += dout * norm, db += dout.
  void (*layernorm_backward)(float* dinp, float* dw, float* db,
                             const float* dout, const float* x, const float* w,
                             float mean, float rstd, int C);
};

// A VecOps named `name` from functions with the member names in CamelCase
// (Add, Acc, ..., LayernormBackward) visible where it is expanded.
#define ZS_GPT2_VEC_OPS(name)                                         \
  {                                                                   \
    name, Add, Acc, Scale, Max, ExpSum, SoftmaxBackward, GeluForward, \
        GeluBackward, LayernormForward, LayernormBackward             \
  }

// The best table for this CPU (AVX2 if usable, else scalar); chosen once.
const VecOps& Vec();
// The portable table, and the AVX2 one (nullptr when the CPU lacks AVX2/FMA).
const VecOps& ScalarVecOps();
const VecOps* Avx2VecOps();

}  // namespace zeroshard::gpt2

#endif  // ZEROSHARD_WORKER_GPT2_VEC_H_
