// The GPT-2 layer operations, each a forward/backward pair, behind one
// interface that a device implementation fills (CPU: cpu_kernels.h; a CUDA
// implementation comes later). The model (model.h) owns every buffer and the
// order of the calls; a Kernels implementation owns only its threads and
// scratch.
//
// Conventions (llm.c's):
//   * All pointers are raw fp32 (tokens: int32) arrays in the memory the
//     implementation computes on (host memory for the CPU one); shapes are
//     given in comments, row-major, e.g. (B,T,C).
//   * Backward functions ACCUMULATE (+=) into parameter gradients (dw, db,
//     dwte, dwpe) so that a tied weight collects all its contributions, and
//     into the gradient of a layer input when the comment says "+=";
//     otherwise they overwrite their outputs.
//   * Sizes are validated by the model before any call (B*T and every
//     dimension fit an int, element counts fit int64); kernels do not check.
//   * Results are deterministic for a given implementation and thread count:
//     the same inputs give the same bits, whatever the buffers' addresses (as
//     long as buffers are 64-byte aligned).
//
// Threading: one Kernels object is used by one thread at a time; it may use
// its own threads inside a call. Calls return when their work is done.
#ifndef ZEROSHARD_WORKER_GPT2_KERNELS_H_
#define ZEROSHARD_WORKER_GPT2_KERNELS_H_

#include <cstdint>

namespace zeroshard::gpt2 {

class Kernels {
 public:
  virtual ~Kernels() = default;

  // "cpu (2 threads, avx2)".
  virtual const char* Name() const = 0;

  // x[i] = 0 for i in [0, n).
  virtual void Zero(float* x, int64_t n) = 0;

  // Token + position embedding.
  // out (B,T,C) = wte[inp[b,t]] (Vp,C) + wpe[t] (maxT,C); inp (B,T).
  virtual void EncoderForward(float* out, const int* inp, const float* wte,
                              const float* wpe, int B, int T, int C) = 0;
  // dwte (Vp,C) += scatter of dout (B,T,C) by inp; dwpe (maxT,C) += sum over
  // b.
  virtual void EncoderBackward(float* dwte, float* dwpe, const float* dout,
                               const int* inp, int B, int T, int C) = 0;

  // LayerNorm over the last dimension, eps 1e-5.
  // out (N,C) = (inp - mean) * rstd * w (C) + b (C); saves mean, rstd (N).
  virtual void LayernormForward(float* out, float* mean, float* rstd,
                                const float* inp, const float* w,
                                const float* b, int64_t N, int C) = 0;
  // dinp (N,C) +=, dw (C) +=, db (C) += from dout (N,C).
  virtual void LayernormBackward(float* dinp, float* dw, float* db,
                                 const float* dout, const float* inp,
                                 const float* w, const float* mean,
                                 const float* rstd, int64_t N, int C) = 0;

  // out (N,OC) = inp (N,C) @ w^T + b; w (OC,C) as torch.nn.Linear; b (OC) may
  // be null (no bias).
  virtual void MatmulForward(float* out, const float* inp, const float* w,
                             const float* b, int64_t N, int C, int OC) = 0;
  // dinp (N,C) = dout @ w (overwritten); dw (OC,C) += dout^T @ inp;
  // db (OC) += column sums of dout (skipped when db is null).
  virtual void MatmulBackward(float* dinp, float* dw, float* db,
                              const float* dout, const float* inp,
                              const float* w, int64_t N, int C, int OC) = 0;

  // Causal multi-head self-attention, NH heads of size hs = C/NH, scale
  // 1/sqrt(hs). qkv (B,T,3C) holds q, k, v side by side (head h at columns
  // h*hs of each third). out (B,T,C) = softmax(q k^T * scale, masked) @ v,
  // heads side by side; saves the probabilities att (B,NH,T,T) (entries
  // above the diagonal are 0).
  virtual void AttentionForward(float* out, float* att, const float* qkv, int B,
                                int T, int C, int NH) = 0;
  // dqkv (B,T,3C) = gradient from dout (B,T,C) (overwritten).
  virtual void AttentionBackward(float* dqkv, const float* dout,
                                 const float* qkv, const float* att, int B,
                                 int T, int C, int NH) = 0;

  // GELU, tanh approximation: out = 0.5 x (1 + tanh(sqrt(2/pi) (x +
  // 0.044715 x^3))). inp, out (n); out may equal inp.
  virtual void GeluForward(float* out, const float* inp, int64_t n) = 0;
  // dinp (n) = dout * gelu'(inp) (overwritten; dinp may equal dout).
  virtual void GeluBackward(float* dinp, const float* inp, const float* dout,
                            int64_t n) = 0;

  // out (n) = a + b (out may equal a or b).
  virtual void ResidualForward(float* out, const float* a, const float* b,
                               int64_t n) = 0;
  // da (n) += dout; db (n) += dout.
  virtual void ResidualBackward(float* da, float* db, const float* dout,
                                int64_t n) = 0;

  // Softmax cross-entropy over the first V of Vp columns (padding ignored).
  // losses (N) = -log softmax(logits (N,Vp))[targets (N)].
  virtual void CrossEntropyForward(float* losses, const float* logits,
                                   const int* targets, int64_t N, int V,
                                   int Vp) = 0;
  // dlogits (N,Vp) = dloss * (softmax(logits) - onehot(target)) over the
  // first V columns, 0 in the padding; dloss is the same for every row (the
  // mean's 1/N). dlogits may equal logits (in place, as llm.c's fused
  // classifier).
  virtual void CrossEntropyBackward(float* dlogits, const float* logits,
                                    const int* targets, float dloss, int64_t N,
                                    int V, int Vp) = 0;
};

}  // namespace zeroshard::gpt2

#endif  // ZEROSHARD_WORKER_GPT2_KERNELS_H_
