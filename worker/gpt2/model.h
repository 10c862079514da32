// GPT-2 forward and backward for one fixed batch shape (B,T): the model owns
// the activation memory (activations.h, allocated once in Create) and the
// order of the layer calls; the arithmetic is done by a Kernels
// implementation (kernels.h; CpuKernels by default).
//
// Parameters and gradients are flat fp32 buffers in ParamLayout's memory
// order (config.h). Either the model allocates them, or the caller passes
// its own (ZeRO stage 3 fills the parameter buffer layer by layer); views of
// single tensors come from param() / grad().
//
// One training step:
//   model->ZeroGrad();
//   ZS_ASSIGN_OR_RETURN(float loss, model->Forward(inputs, targets));
//   ZS_RETURN_IF_ERROR(model->Backward(hook));  // grads += d(loss)/d(params)
//
// Loss: the mean cross-entropy over the B*T positions (real vocabulary only;
// padded columns never scored); backward starts from dloss = 1/(B*T) per
// position. The tied wte collects gradients from the LM head and from the
// token embedding.
//
// Backward calls `hook` as each part's gradients become final, in this
// order: the final LayerNorm, blocks L-1 .. 0, then the embeddings (wte, wpe:
// last, because the token embedding adds to wte after the LM head did), so
// that gradient buckets can be reduced while backward continues. The hook
// runs on the calling thread, between kernel calls.
//
// Parameter hook (ModelOptions::param_hook, for ZeRO stage 3): the model
// calls it with kNeeded before it reads a part's parameters and kReleased
// once it is done with them, so that a caller can fill the parameter buffer
// just in time and drop what is not needed. The sequence of one Forward:
//   need(emb) encoder release(emb);
//   for l in 0..L-1: need(block l) block forward release(block l);
//   need(final norm) need(emb) final norm, LM head, loss
//   release(emb) release(final norm);
// of one Backward:
//   need(final norm) need(emb) loss, LM head and final norm backward
//   release(emb) release(final norm) [grad hook: final norm];
//   for l in L-1..0: need(block l) (recompute,) block backward
//   release(block l) [grad hook: block l];
//   encoder backward (reads no parameters) [grad hook: embeddings].
// A non-OK status from the hook stops the call and is returned; the
// gradients may then be partly accumulated.
//
// Placement (ModelOptions::placed, for a bounded device pool): the model
// keeps no flat buffers; the caller puts each part's parameters and
// gradients where it likes with Place, typically from the param hook at
// kNeeded, and the model reads and accumulates there. A part used while
// not placed fails the call with FAILED_PRECONDITION naming it.
//
// Checkpointing (ModelOptions::checkpoint): forward keeps only each block's
// input; backward recomputes the block's forward just before its backward.
// Gradients are bitwise identical to the run without it.
//
// Threading: a Model is used by one thread at a time. Errors: see each
// method; a failed call changes nothing.
#ifndef ZEROSHARD_WORKER_GPT2_MODEL_H_
#define ZEROSHARD_WORKER_GPT2_MODEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/partition.h"
#include "worker/gpt2/activations.h"
#include "worker/gpt2/config.h"
#include "worker/gpt2/device.h"
#include "worker/gpt2/kernels.h"

namespace zeroshard::gpt2 {

// Which gradients a GradHook call announces as final.
struct GradSegment {
  enum class Part { kFinalNorm, kBlock, kEmbeddings };
  Part part;
  int layer = -1;  // block index for kBlock, -1 otherwise
  Range range;     // flat range in ParamLayout memory order
};
using GradHook = std::function<void(const GradSegment&)>;

// A ParamHook call: `kNeeded` before the model reads the parameters of
// `range` (the part's flat range), `kReleased` after its last read.
struct ParamEvent {
  enum class Kind { kNeeded, kReleased };
  Kind kind;
  GradSegment::Part part;
  int layer = -1;  // block index for kBlock, -1 otherwise
  Range range;
};
using ParamHook = std::function<absl::Status(const ParamEvent&)>;

// The part (the engine's unit) of (part, layer) in a model of `num_layers`
// blocks: 0 the embeddings, 1 + l block l, L + 1 the final norm.
int UnitIndex(GradSegment::Part part, int layer, int num_layers);

struct ModelOptions {
  // Threads of the CPU kernels the model creates when `kernels` is null.
  int threads = 1;
  // Kernels to use (not owned; must outlive the model), or null.
  Kernels* kernels = nullptr;
  // Recompute each block's forward in backward instead of keeping it.
  bool checkpoint = false;
  // Caller-owned flat parameter / gradient buffers of exactly num_params
  // floats (must outlive the model), or empty for model-owned ones (params
  // uninitialised (zero), gradients zero).
  absl::Span<float> params;
  absl::Span<float> grads;
  // Called around every use of a part's parameters (see the file comment);
  // null: no calls.
  ParamHook param_hook;
  // The caller places every part (the file comment): params and grads must
  // then be empty, and params() / grads() are.
  bool placed = false;
  // Where the model computes (device.h; not owned, must outlive the model),
  // or null for host memory and the kernels above. With a device, `kernels`
  // must be null (the device's compute), the activations and model-owned
  // parameters and gradients are device memory, and caller `params` /
  // `grads` must be too; Forward copies the tokens in and the per-position
  // losses out (losses() stays host memory; logits() is device memory).
  Device* device = nullptr;
};

class Model {
 public:
  // INVALID_ARGUMENT for an invalid config (ValidateConfig), a bad batch
  // shape (B < 1, T outside [1, max_seq_len], B*T or an activation size
  // that overflows), threads < 1, or a params/grads span whose size is not
  // num_params; RESOURCE_EXHAUSTED when memory runs out.
  static absl::StatusOr<std::unique_ptr<Model>> Create(
      const Config& config, int B, int T, const ModelOptions& options);

  const Config& config() const { return layout_.config(); }
  const ParamLayout& layout() const { return layout_; }
  int B() const { return B_; }
  int T() const { return T_; }
  bool checkpoint() const { return checkpoint_; }
  Kernels& kernels() { return *kernels_; }
  ~Model();
  Device* device() const { return device_; }
  // Floats of activation memory (fixed at Create).
  int64_t activation_floats() const { return arena_->floats(); }

  // Flat buffers (num_params floats) and single tensors in them.
  absl::Span<float> params() { return params_; }
  absl::Span<float> grads() { return grads_; }
  absl::Span<float> param(ParamKind kind, int layer = -1);
  absl::Span<float> grad(ParamKind kind, int layer = -1);

  // Runs forward over inputs (B,T). With targets (B,T) it also computes
  // the loss and returns it (and prepares Backward); with empty targets it
  // returns 0 and only the logits are valid. INVALID_ARGUMENT, naming the
  // position (b, t) and the token, when a span has not B*T entries or a
  // token is outside [0, vocab_size).
  absl::StatusOr<float> Forward(absl::Span<const int> inputs,
                                absl::Span<const int> targets);

  // Logits (B,T,Vp) of the last Forward (padded columns included), in the
  // model's memory (a device's, with one); valid until Backward, which
  // overwrites them with their gradient.
  absl::Span<const float> logits() const;
  // Per-position losses (B,T) of the last Forward with targets.
  absl::Span<const float> losses() const;

  // Adds the gradient of the last Forward's loss to grads(), calling `hook`
  // (if set) as parts complete. FAILED_PRECONDITION unless the last Forward
  // had targets and has not been backpropagated yet.
  absl::Status Backward(const GradHook& hook = nullptr);

  // grads() = 0 (placed: every placed part's gradients).
  void ZeroGrad();

  // With ModelOptions::placed: `part`'s (and `layer`'s) parameters and
  // gradients are at `params` and `grads` from now on, each as many floats
  // as the part's range, in its memory order (null: not placed). Not
  // owned; they must stay until the part is placed elsewhere or the model
  // is gone. Without `placed` this does nothing.
  void Place(GradSegment::Part part, int layer, float* params, float* grads);
  // The part a tensor belongs to: 0 the embeddings, 1 + l block l, L + 1
  // the final norm (GPT-2's engine units).
  int PartIndex(ParamKind kind, int layer) const;

 private:
  Model(ParamLayout layout, int B, int T)
      : layout_(std::move(layout)), B_(B), T_(T) {}

  // Calls the param hook (if any) for `part` (and `layer`); at kNeeded
  // then FAILED_PRECONDITION unless the part is placed.
  absl::Status Params(ParamEvent::Kind kind, GradSegment::Part part,
                      int layer = -1);
  // OK when part `index`'s gradients are placed; else FAILED_PRECONDITION.
  absl::Status GradsPlaced(int index) const;
  // A part's flat range (its index: PartIndex, UnitIndex).
  Range PartRange(int index) const;
  // Block l's forward from x + l*BTC into `a`, writing x + (l+1)*BTC.
  void BlockForward(int l, const BlockActs& a);
  void BlockBackward(int l, const BlockActs& a);
  const float* P(ParamKind kind, int layer = -1) const;
  float* G(ParamKind kind, int layer = -1);

  ParamLayout layout_;
  int B_, T_;
  bool checkpoint_ = false;
  ParamHook param_hook_;
  Device* device_ = nullptr;
  float* device_owned_ = nullptr;   // params then grads, with a device
  std::vector<float> host_losses_;  // with a device: losses() (B,T)
  std::unique_ptr<Kernels> owned_kernels_;
  Kernels* kernels_ = nullptr;
  std::unique_ptr<ActivationArena> arena_;
  std::vector<float> owned_params_, owned_grads_;
  absl::Span<float> params_, grads_;
  bool placed_ = false;
  // Per part (PartIndex): where its parameters and gradients begin.
  std::vector<float*> part_params_, part_grads_;
  float loss_ = 0;
  bool backward_ready_ = false;  // last Forward had targets, no Backward yet
  bool logits_valid_ = false;
  int cached_block_ = -1;  // with checkpointing: layer held by blocks[0]
};

}  // namespace zeroshard::gpt2

#endif  // ZEROSHARD_WORKER_GPT2_MODEL_H_
