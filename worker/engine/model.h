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

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelLayout& layout() const = 0;
  // The mean loss of `batch`. INVALID_ARGUMENT for a batch of the wrong
  // shape or out-of-range labels.
  virtual absl::StatusOr<float> Forward(const MicroBatch& batch) = 0;
  // FAILED_PRECONDITION unless a Forward with targets came first.
  virtual absl::Status Backward(const GradHook& hook) = 0;
  // The gradient buffer = 0.
  virtual void ZeroGrad() = 0;
};

// What the engine hands a model it creates: its flat buffers
// (num_params floats each; engine-owned, outliving the model) and the unit
// hook (stage 3; null otherwise).
struct ModelContext {
  absl::Span<float> params;
  absl::Span<float> grads;
  UnitHook unit_hook;
  int threads = 1;
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
