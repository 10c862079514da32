// The GPT-2 model's activation memory: every buffer forward and backward
// use, sized from (config, B, T) and carved out of ONE allocation made when
// the model is created, so that a training step allocates nothing.
//
// With activation checkpointing only the block inputs x (L+1,B,T,C) are kept
// per layer; the other per-block activations exist once and are recomputed
// for each block in backward.
//
// Every buffer starts on a 64-byte boundary. Not thread-safe; owned by the
// model.
#ifndef ZEROSHARD_WORKER_GPT2_ACTIVATIONS_H_
#define ZEROSHARD_WORKER_GPT2_ACTIVATIONS_H_

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/gpt2/config.h"
#include "worker/gpt2/device.h"

namespace zeroshard::gpt2 {

// What forward saves for one transformer block.
struct BlockActs {
  float* ln1;       // (B,T,C)
  float* ln1_mean;  // (B,T)
  float* ln1_rstd;  // (B,T)
  float* qkv;       // (B,T,3C)
  float* atty;      // (B,T,C) attention output, heads side by side
  float* att;       // (B,NH,T,T) attention probabilities
  float* res2;      // (B,T,C) x + attention projection
  float* ln2;       // (B,T,C)
  float* ln2_mean;  // (B,T)
  float* ln2_rstd;  // (B,T)
  float* fch;       // (B,T,4C) MLP hidden, before GELU
  float* fch_gelu;  // (B,T,4C)
};

struct Activations {
  float* x;                       // (L+1,B,T,C): block l reads x + l*B*T*C
  std::vector<BlockActs> blocks;  // L sets, or 1 with checkpointing
  float* lnf;                     // (B,T,C)
  float* lnf_mean;                // (B,T)
  float* lnf_rstd;                // (B,T)
  float* logits;                  // (B,T,Vp); dlogits in place in backward
  float* losses;                  // (B,T)
  // Backward scratch.
  float* dres;   // (B,T,C) gradient of the residual stream
  float* dc;     // (B,T,C) gradient of a LayerNorm output / attention output
  float* d4c;    // (B,T,4C) gradient of the MLP hidden, or of qkv (3C)
  int* inputs;   // (B,T) token ids of the last forward
  int* targets;  // (B,T)
};

class ActivationArena {
 public:
  // INVALID_ARGUMENT when B < 1, T < 1, T > max_seq_len, B*T exceeds
  // INT_MAX, or a buffer's size overflows int64 (naming the shape);
  // RESOURCE_EXHAUSTED when the allocation fails. `config` must be valid.
  // `device` (not owned; must outlive the arena): the arena lives in its
  // memory; null: host memory.
  static absl::StatusOr<std::unique_ptr<ActivationArena>> Create(
      const Config& config, int B, int T, bool checkpoint,
      Device* device = nullptr);

  const Activations& acts() const { return acts_; }
  // Size of the allocation, in floats.
  int64_t floats() const { return floats_; }

  ~ActivationArena();

 private:
  ActivationArena() = default;
  Device* device_ = nullptr;
  float* memory_ = nullptr;
  int64_t floats_ = 0;
  Activations acts_;
};

}  // namespace zeroshard::gpt2

#endif  // ZEROSHARD_WORKER_GPT2_ACTIVATIONS_H_
