// GPT-2 on a Device (device.h) as the engine's model (worker/engine/model.h):
// the model's parameters, gradients and activations in device memory; the
// engine's flat buffers stay in host memory and the model copies between
// them.
//
// Stage 0 (no unit hook): the whole parameter buffer goes up at a step's
// first Forward and every gradient comes down as Backward finishes it; with
// one rank the engine may keep the optimizer on the device instead
// (engine::ResidentOptimizer), and then nothing crosses in a step.
//
// Stages 1-3 (a unit hook): every unit's parameters live in a slot of
// device memory with its gradients beside them. The embeddings and the
// final norm (needed at both ends of a pass) have slots of their own; the
// blocks share a pool of S slots: as many as ModelContext::max_live_params
// (stage 3: stage3_max_live_parameters; else no bound) leaves beside the
// embeddings and the final norm, at least 2 (one computing, the next
// going up) and at most L. A
// block that needs a slot takes a free one, else the one released longest
// ago (its gradients' copy down waited for first), and its gradients there
// start at zero. A unit goes up once a step into its slot (BeginStep), at
// its first need after the engine's hook has put it in place, on the
// device's copy stream (ToDeviceAsync) after the mark recorded at the last
// release of the slot's previous occupant, so that it waits only for the
// kernels that read that occupant, never for the kernels just before it;
// it is waited for at the unit's release, before the engine's hook may
// drop the host's copy. Gradients come down a unit at a time as Backward
// announces them final, before the engine's grad hook sees them.
//
// Threading and errors: engine/model.h's; a device error is returned and
// the model is unusable after it.
#ifndef ZEROSHARD_WORKER_GPT2_DEVICE_MODEL_H_
#define ZEROSHARD_WORKER_GPT2_DEVICE_MODEL_H_

#include <memory>

#include "absl/status/statusor.h"
#include "worker/engine/model.h"
#include "worker/gpt2/config.h"
#include "worker/gpt2/device.h"

namespace zeroshard::gpt2 {

// GPT-2 of `config` on B x T micro-batches on `device`, over the engine's
// buffers and hook in `context` (`layout`: EngineLayout(config)). Fails
// with the device's errors (RESOURCE_EXHAUSTED naming the size) or
// Model::Create's.
absl::StatusOr<std::unique_ptr<engine::Model>> CreateDeviceModel(
    engine::ModelLayout layout, std::unique_ptr<Device> device,
    const Config& config, int B, int T, bool checkpoint,
    const engine::ModelContext& context);

}  // namespace zeroshard::gpt2

#endif  // ZEROSHARD_WORKER_GPT2_DEVICE_MODEL_H_
