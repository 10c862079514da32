#include "worker/gpt2/engine_model.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "common/cuda/device.h"
#include "common/status_macros.h"
#include "worker/gpt2/cuda/cuda_device.h"
#include "worker/gpt2/device_model.h"
#include "worker/gpt2/host_device.h"

namespace zeroshard::gpt2 {
namespace {

class EngineGpt2 : public engine::Model {
 public:
  EngineGpt2(engine::ModelLayout layout, std::unique_ptr<gpt2::Model> model)
      : layout_(std::move(layout)), model_(std::move(model)) {}

  const engine::ModelLayout& layout() const override { return layout_; }
  absl::StatusOr<float> Forward(const engine::MicroBatch& batch) override {
    return model_->Forward(batch.tokens, batch.targets);
  }
  absl::Status Backward(const engine::GradHook& hook) override {
    const int L = model_->config().num_layers;
    return model_->Backward([&](const GradSegment& s) {
      if (hook) hook(engine::GradReady{UnitIndex(s.part, s.layer, L), s.range});
    });
  }
  void ZeroGrad() override { model_->ZeroGrad(); }
  uint64_t activation_bytes() const override {
    return static_cast<uint64_t>(model_->activation_floats()) * sizeof(float);
  }

 private:
  const engine::ModelLayout layout_;
  std::unique_ptr<gpt2::Model> model_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Device>> CreateDevice(const std::string& kind,
                                                     const Config& config,
                                                     int B, int T, int threads,
                                                     bool bf16,
                                                     int local_rank) {
  ZS_RETURN_IF_ERROR(ValidateDeviceKind(kind));
  if (kind == "host-emulated") {
    // ZEROSHARD_HOST_COPY_LAG_US=N: each asynchronous copy runs N µs after
    // it was issued (tests: a hook that reads too early sees zeros).
    int64_t lag_us = 0;
    if (const char* v = std::getenv("ZEROSHARD_HOST_COPY_LAG_US");
        v != nullptr && *v != '\0' &&
        (!absl::SimpleAtoi(v, &lag_us) || lag_us < 0 || lag_us > 1000000)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "ZEROSHARD_HOST_COPY_LAG_US='%s': want microseconds, 0 to 1000000",
          v));
    }
    ZS_ASSIGN_OR_RETURN(auto d, HostEmulatedDevice::Create(
                                    threads, absl::Microseconds(lag_us)));
    return std::unique_ptr<Device>(std::move(d));
  }
  if (kind == "cuda") {
    // With no GPU visible GPU 0 is asked for: the device's error says why.
    return CreateCudaDevice(config, B, T,
                            bf16 ? CudaPrecision::kBf16 : CudaPrecision::kFp32,
                            GpuForLocalRank(local_rank, cuda::DeviceCount()));
  }
  return std::unique_ptr<Device>();  // cpu: no device
}

engine::UnitEvent ToUnitEvent(const ParamEvent& e, int num_layers) {
  engine::UnitEvent u;
  u.kind = e.kind == ParamEvent::Kind::kNeeded
               ? engine::UnitEvent::Kind::kNeeded
               : engine::UnitEvent::Kind::kReleased;
  u.unit = UnitIndex(e.part, e.layer, num_layers);
  u.range = e.range;
  return u;
}

int GpuForLocalRank(int local_rank, int count) {
  return count < 1 || local_rank < 0 ? 0 : local_rank % count;
}

absl::Status ValidateDeviceKind(const std::string& kind) {
  if (kind == "cpu" || kind == "cuda" || kind == "host-emulated") {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("device '%s': want cpu, cuda or host-emulated", kind));
}

std::vector<int> NeedSchedule(int num_layers) {
  const int emb = 0, fn = num_layers + 1;
  std::vector<int> s = {emb};
  for (int l = 0; l < num_layers; ++l) s.push_back(1 + l);
  s.insert(s.end(), {fn, emb, fn, emb});
  for (int l = num_layers - 1; l >= 0; --l) s.push_back(1 + l);
  return s;
}

absl::StatusOr<engine::ModelLayout> EngineLayout(const Config& config) {
  ZS_ASSIGN_OR_RETURN(ParamLayout layout, ParamLayout::Create(config));
  // Memory order: wte, wpe; every block's tensors; lnfw, lnfb.
  const int per_block = static_cast<int>(
      std::count_if(layout.tensors().begin(), layout.tensors().end(),
                    [](const ParamTensor& t) { return t.layer == 0; }));
  std::vector<int> unit_sizes = {2};
  for (int l = 0; l < config.num_layers; ++l) unit_sizes.push_back(per_block);
  unit_sizes.push_back(2);
  return engine::MakeModelLayout(layout.TensorDescs(), unit_sizes,
                                 NeedSchedule(config.num_layers));
}

absl::StatusOr<engine::ModelDef> EngineModel(const Config& config, int B, int T,
                                             bool checkpoint,
                                             const std::string& device,
                                             int local_rank) {
  ZS_RETURN_IF_ERROR(ValidateDeviceKind(device));
  engine::ModelDef def;
  ZS_ASSIGN_OR_RETURN(def.layout, EngineLayout(config));
  def.create = [config, B, T, checkpoint, device, local_rank,
                layout = def.layout](const engine::ModelContext& c)
      -> absl::StatusOr<std::unique_ptr<engine::Model>> {
    if (device != "cpu") {
      ZS_ASSIGN_OR_RETURN(
          std::unique_ptr<Device> d,
          CreateDevice(device, config, B, T, c.threads, c.bf16, local_rank));
      return CreateDeviceModel(layout, std::move(d), config, B, T, checkpoint,
                               c);
    }
    ModelOptions mo;
    mo.threads = c.threads;
    mo.checkpoint = checkpoint;
    mo.params = c.params;
    mo.grads = c.grads;
    if (c.unit_hook) {
      const int L = config.num_layers;
      mo.param_hook = [hook = c.unit_hook, L](const ParamEvent& e) {
        return hook(ToUnitEvent(e, L));
      };
    }
    ZS_ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                        Model::Create(config, B, T, mo));
    return std::unique_ptr<engine::Model>(
        new EngineGpt2(layout, std::move(model)));
  };
  return def;
}

}  // namespace zeroshard::gpt2
