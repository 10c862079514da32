// GPT-2 as the ZeRO engine's model (worker/engine/model.h).
//
// Layout: the tensors in memory order (config.h; matrices in parameter
// group 0, with weight decay, the rest in group 1); units 0 the embeddings
// (wte, wpe), 1 + l block l, L + 1 the final norm; the need schedule of one
// Forward and one Backward (model.h's parameter hook order): embeddings,
// blocks 0..L-1, final norm, embeddings, final norm, embeddings, blocks
// L-1..0. A micro-batch is B sequences of T tokens and their next tokens
// (MicroBatch::tokens, ::targets).
//
// Threading and errors: model.h's.
#ifndef ZEROSHARD_WORKER_GPT2_ENGINE_MODEL_H_
#define ZEROSHARD_WORKER_GPT2_ENGINE_MODEL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/model.h"
#include "worker/gpt2/config.h"
#include "worker/gpt2/device.h"
#include "worker/gpt2/model.h"

namespace zeroshard::gpt2 {

// The engine's layout of `config` (ValidateConfig's errors).
absl::StatusOr<engine::ModelLayout> EngineLayout(const Config& config);

// GPT-2 of `config` on micro-batches of B × T tokens; `checkpoint`: recompute
// each block in backward (ModelOptions::checkpoint). `device`: where the
// model computes (device.h): "cpu" (host memory, CpuKernels), "cuda" (the
// GPU: CudaKernels in fp32; the engine's buffers stay in host memory and
// parameters go up per unit as they are needed, gradients come down per
// unit as they are final; device_model.h) or "host-emulated" (the cuda path
// with host memory standing in for the GPU's and CpuKernels: the same bits as
// "cpu", every copy checked). INVALID_ARGUMENT for another device; creating the
// model fails with the device's error (e.g. UNAVAILABLE: no GPU).
// `local_rank`: the rank's place in its node, which picks its GPU
// (CreateDevice).
absl::StatusOr<engine::ModelDef> EngineModel(const Config& config, int B, int T,
                                             bool checkpoint = false,
                                             const std::string& device = "cpu",
                                             int local_rank = 0);

// OK for "cpu", "cuda" and "host-emulated"; INVALID_ARGUMENT naming the
// value otherwise.
absl::Status ValidateDeviceKind(const std::string& kind);

// The Device (device.h) of `kind` for GPT-2 `config` on B x T micro-batches
// (CPU kernels: `threads`; CUDA: matmuls on bf16 operands when `bf16`,
// CudaPrecision::kBf16, else fp32; on GPU `local_rank` mod the GPUs this
// process sees, so a node's ranks spread over its GPUs), or null for "cpu"
// (host memory, no device); ValidateDeviceKind's error, or the device's
// (UNAVAILABLE: no GPU).
absl::StatusOr<std::unique_ptr<Device>> CreateDevice(const std::string& kind,
                                                     const Config& config,
                                                     int B, int T, int threads,
                                                     bool bf16 = false,
                                                     int local_rank = 0);

// The GPU a rank at `local_rank` of its node uses among `count` visible:
// local_rank mod count (0 where count < 1 or local_rank < 0).
int GpuForLocalRank(int local_rank, int count);

// The engine's view of a model's parameter event.
engine::UnitEvent ToUnitEvent(const ParamEvent& e, int num_layers);
// The need schedule above for `num_layers` blocks.
std::vector<int> NeedSchedule(int num_layers);

}  // namespace zeroshard::gpt2

#endif  // ZEROSHARD_WORKER_GPT2_ENGINE_MODEL_H_
