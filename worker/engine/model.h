// The engine's view of a model (engine.h): its parameters as one flat fp32
// layout of tensors grouped into units, and forward/backward with the hooks
// the engine needs. Any model that declares these trains through the
// engine; GPT-2 (worker/gpt2/engine_model.h) and the tests' MLP
// (worker/mlp/mlp.h) are two.
//
//   layout    tensors (name, shape, parameter group: 0 decays, 1 does not)
//             laid out one after another from flat index 0; units,
//             contiguous runs of whole tensors covering the layout in flat
//             order, which ZeRO stage 3 gathers and releases as a whole;
//             and the need schedule: the unit indices in the order one
//             Forward and then one Backward need them.
//   Forward   one micro-batch's mean loss. Around every read of a unit's
//             parameters the model calls the unit hook: kNeeded before,
//             kReleased after the last read, in the order of the schedule.
//   BeginStep before the first Forward of every step (the first after a
//             restore included): the parameter buffer may have changed
//             since the last Forward. A model that keeps its own copy of
//             the parameters (on a device) refreshes each unit before it
//             next reads it; within a step they do not change.
//   Backward  adds the gradient of the last Forward's loss to the gradient
//             buffer and calls the grad hook with each unit's range as its
//             gradients become final, in descending flat order (the last
//             unit first), so that gradient buckets can be reduced while
//             backward goes on.
//
// The engine owns the flat parameter and gradient buffers and creates the
// model with them (ModelDef::create). Threading: one thread calls a model.
// Errors: a hook's non-OK status stops the call and is returned.
#ifndef ZEROSHARD_WORKER_ENGINE_MODEL_H_
#define ZEROSHARD_WORKER_ENGINE_MODEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/optim/adamw.h"
#include "common/partition.h"

namespace zeroshard::engine {

struct ModelLayout {
  std::vector<TensorInfo> tensors;  // flat order, contiguous from 0
  std::vector<Range> units;         // flat order, contiguous, covering all
  std::vector<int> need_schedule;   // unit indices: one Forward, one Backward

  uint64_t num_params() const {
    return tensors.empty() ? 0 : tensors.back().range.end;
  }
  std::vector<TensorDesc> TensorDescs() const;
};

// A layout of `tensors` (laid out in this order) split into units of
// `unit_sizes` tensors each. INVALID_ARGUMENT naming the problem for an
// empty or zero-sized tensor, unit sizes that do not add up, or a schedule
// index outside the units.
absl::StatusOr<ModelLayout> MakeModelLayout(
    const std::vector<TensorDesc>& tensors, const std::vector<int>& unit_sizes,
    std::vector<int> need_schedule);
// INVALID_ARGUMENT naming the problem when `layout` breaks the rules above.
absl::Status ValidateModelLayout(const ModelLayout& layout);

// Backward made the gradients of unit `unit` (flat `range`) final; every
// gradient at or above range.begin is final then.
struct GradReady {
  int unit = 0;
  Range range;
};
using GradHook = std::function<void(const GradReady&)>;

struct UnitEvent {
  enum class Kind { kNeeded, kReleased };
  Kind kind = Kind::kNeeded;
  int unit = 0;
  Range range;
};
using UnitHook = std::function<absl::Status(const UnitEvent&)>;

// One micro-batch: token models read `tokens` and `targets` (next tokens);
// others `features` and `targets` (labels).
struct MicroBatch {
  absl::Span<const int> tokens;
  absl::Span<const float> features;
  absl::Span<const int> targets;
};

// One tensor's share of an AdamW step: its flat range and its hyperparameters
// (step count, clip coefficient and learning rate included).
struct TensorUpdate {
  Range range;
  AdamWHyper hyper;
};

// Stage 0 with the optimizer where the model keeps its parameters and
// gradients (a GPU's memory), so that a step moves nothing to the host: a
// model on a device offers it (Model::resident_optimizer) and the engine
// uses it for one rank in fp32 (engine.h). The engine keeps the arithmetic
// (the step count, the hyperparameters, the clip decision); the model runs
// it on its memory with AdamWStep's bits (common/optim/adamw.h).
// Threading and errors: the model's; a device error is returned and the
// model is unusable after it.
class ResidentOptimizer {
 public:
  virtual ~ResidentOptimizer() = default;
  // From now on the model's own copy of the parameters is the only one: it
  // is written once from the engine's buffer now and updated in place by
  // AdamW; backward leaves gradients in the model's memory (the engine's
  // gradient buffer is not written) and adds to them until the model's
  // ZeroGrad. Allocates the moments m and v (8 bytes per parameter), zero:
  // RESOURCE_EXHAUSTED naming the size.
  virtual absl::Status Enable() = 0;
  // The model's gradients *= s.
  virtual absl::Status ScaleGrads(float s) = 0;
  // Sum of the squares of the model's gradients, accumulated in fp64.
  virtual absl::StatusOr<double> GradSumSquares() = 0;
  // One AdamW step (AdamWStep of each update's hyper over its range).
  virtual absl::Status AdamW(absl::Span<const TensorUpdate> updates) = 0;
  // out (num_params floats) = the model's parameters.
  virtual absl::Status ReadParameters(absl::Span<float> out) = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  // Non-null when the model can keep stage 0's optimizer (above); owned by
  // the model.
  virtual ResidentOptimizer* resident_optimizer() { return nullptr; }
  virtual const ModelLayout& layout() const = 0;
  // The engine's parameters may hold new values from here on (above).
  virtual void BeginStep() {}
  // Bytes of device memory the model holds for parameters and gradients
  // (and a resident optimizer's moments; activations not counted): 0 for
  // a model in host memory.
  virtual uint64_t device_bytes() const { return 0; }
  // Bytes of the model's activation memory (host or device; fixed at
  // creation); 0 when it does not say.
  virtual uint64_t activation_bytes() const { return 0; }
  // The mean loss of `batch`. INVALID_ARGUMENT for a batch of the wrong
  // shape or out-of-range labels.
  virtual absl::StatusOr<float> Forward(const MicroBatch& batch) = 0;
  // FAILED_PRECONDITION unless a Forward with targets came first.
  virtual absl::Status Backward(const GradHook& hook) = 0;
  // The gradient buffer = 0.
  virtual void ZeroGrad() = 0;
};

// What the engine hands a model it creates: its flat buffers
// (num_params floats each; engine-owned, outliving the model), the unit
// hook (stages 1-3 when units are fetched or gathered; null otherwise), and
// whether the engine trains in bf16 (its masters stay fp32 and the
// parameters come rounded to bf16; a model on a device may then run its
// matmuls on bf16 operands with fp32 accumulation).
struct ModelContext {
  absl::Span<float> params;
  absl::Span<float> grads;
  UnitHook unit_hook;
  int threads = 1;
  bool bf16 = false;
  // Stage 3: the most parameters a model on a device should keep there
  // (DeepSpeed's stage3_max_live_parameters; what a pass reads at once is
  // always kept; 0: only that); the default: no bound.
  uint64_t max_live_params = UINT64_MAX;
};

// A model the engine can create: its layout first (the engine sizes its
// buffers from it), then the model over them.
struct ModelDef {
  ModelLayout layout;
  std::function<absl::StatusOr<std::unique_ptr<Model>>(const ModelContext&)>
      create;
};

}  // namespace zeroshard::engine

#endif  // ZEROSHARD_WORKER_ENGINE_MODEL_H_
