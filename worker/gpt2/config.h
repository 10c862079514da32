// GPT-2 configuration and parameter layout: where every parameter tensor
// lives in the model's flat fp32 buffer. Pure value types; safe to share
// between threads once built.
//
// Memory order (the flat space that ZeRO partitions) keeps each transformer
// block contiguous, so stage 3 gathers a block as one range:
//
//   wte (Vp, C), wpe (maxT, C),
//   block 0: ln1w (C), ln1b (C), qkvw (3C, C), qkvb (3C), attprojw (C, C),
//            attprojb (C), ln2w (C), ln2b (C), fcw (4C, C), fcb (4C),
//            fcprojw (C, 4C), fcprojb (C),
//   block 1 ... block L-1,
//   lnfw (C), lnfb (C).
//
// Weights are (out, in) as in torch.nn.Linear; the LM head is tied to wte.
// llm.c's model file instead groups each kind across layers (all ln1w, then
// all ln1b, ...); FileOrder() lists the tensors in that order so readers
// and writers can permute.
//
// Example:
//   ZS_ASSIGN_OR_RETURN(ParamLayout layout, ParamLayout::Create(config));
//   const ParamTensor& qkvw = layout.Get(ParamKind::kQkvw, /*layer=*/3);
//   float* w = flat.data() + qkvw.offset;  // (3C, C)
#ifndef ZEROSHARD_WORKER_GPT2_CONFIG_H_
#define ZEROSHARD_WORKER_GPT2_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/partition.h"

namespace zeroshard::gpt2 {

struct Config {
  int max_seq_len = 0;        // maxT
  int vocab_size = 0;         // V: real tokens
  int padded_vocab_size = 0;  // Vp >= V: rows of wte (padding never scored)
  int num_layers = 0;         // L
  int num_heads = 0;          // NH
  int channels = 0;           // C

  bool operator==(const Config& o) const;
};

// OK, or INVALID_ARGUMENT naming the first bad field: every field must be
// positive, padded_vocab_size >= vocab_size, num_heads must divide
// channels, and the parameter count must fit the flat space.
absl::Status ValidateConfig(const Config& config);

// "maxT=1024 V=50257 Vp=50304 L=12 NH=12 C=768".
std::string DescribeConfig(const Config& config);

// The kinds of parameter tensor, in llm.c's file order. The per-layer kinds
// (kLn1w .. kFcprojb) also appear in this order inside a block.
enum class ParamKind {
  kWte,
  kWpe,
  kLn1w,
  kLn1b,
  kQkvw,
  kQkvb,
  kAttprojw,
  kAttprojb,
  kLn2w,
  kLn2b,
  kFcw,
  kFcb,
  kFcprojw,
  kFcprojb,
  kLnfw,
  kLnfb,
};
inline constexpr int kNumParamKinds = 16;

// True for the kinds repeated in every block.
bool IsPerLayer(ParamKind kind);
// "wte", "ln1w", ... (llm.c's names).
const char* ParamKindName(ParamKind kind);
// True for matrices (wte, wpe, qkvw, attprojw, fcw, fcprojw): the tensors
// that get weight decay by default; biases and norm parameters do not.
bool IsMatrix(ParamKind kind);

struct ParamTensor {
  std::string name;  // "wte", "h.3.qkvw", "lnfw"
  ParamKind kind;
  int layer = -1;  // block index for per-layer kinds, -1 otherwise
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // first element in the flat buffer
  uint64_t numel = 0;
};

class ParamLayout {
 public:
  // Errors: ValidateConfig's.
  static absl::StatusOr<ParamLayout> Create(const Config& config);

  const Config& config() const { return config_; }
  uint64_t num_params() const { return num_params_; }

  // All tensors in memory order (see the file comment).
  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  // All tensors in llm.c's file order.
  std::vector<const ParamTensor*> FileOrder() const;

  // The tensor of `kind` (and `layer`, for per-layer kinds; ignored
  // otherwise). Requires 0 <= layer < L for per-layer kinds.
  const ParamTensor& Get(ParamKind kind, int layer = -1) const;
  // Flat range of block `layer` (all its 12 tensors, contiguous).
  Range LayerRange(int layer) const;
  // Flat range of the embeddings (wte, wpe) and of the final norm.
  Range EmbeddingRange() const;
  Range FinalNormRange() const;

  // The layout as partition-plan tensors (names and shapes, memory order);
  // matrices in parameter group 0 (weight decay), the rest in group 1.
  std::vector<TensorDesc> TensorDescs() const;

 private:
  Config config_;
  uint64_t num_params_ = 0;
  std::vector<ParamTensor> tensors_;
};

}  // namespace zeroshard::gpt2

#endif  // ZEROSHARD_WORKER_GPT2_CONFIG_H_
