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
#include "worker/gpt2/host_device.h"

namespace zeroshard::gpt2 {
namespace {

// The engine's view of a model's parameter event (L blocks).
engine::UnitEvent ToUnitEvent(const ParamEvent& e, int L) {
  engine::UnitEvent u;
  u.kind = e.kind == ParamEvent::Kind::kNeeded
               ? engine::UnitEvent::Kind::kNeeded
               : engine::UnitEvent::Kind::kReleased;
  u.unit = UnitIndex(e.part, e.layer, L);
  u.range = e.range;
  return u;
}

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

 private:
  const engine::ModelLayout layout_;
  std::unique_ptr<gpt2::Model> model_;
};

// GPT-2 on a Device: the model's parameters, gradients and activations in
// device memory; the engine's flat buffers stay in host memory. Parameters
// go up once a step (engine::Model::BeginStep), before they are first read:
// a unit at its first kNeeded of the step (after the engine's hook has put
// it in place, when there is one), on the device's copy stream beside the
// kernels before it (ToDeviceAsync; the step's UploadFence keeps it behind
// the last step's kernels), waited for at its kReleased, before the
// engine's hook may drop the host's copy; else the whole buffer at the
// step's first Forward. Gradients come down a unit at a time as Backward
// announces them final, before the engine's grad hook sees them; the engine
// zeroes them every micro-batch through ZeroGrad.
//
// As a ResidentOptimizer (stage 0, one rank): after Enable the device's
// copy of the parameters is the only one, the gradients stay on the device
// and AdamW runs there on moments kept there.
class DeviceGpt2 : public engine::Model, public engine::ResidentOptimizer {
 public:
  DeviceGpt2(engine::ModelLayout layout, std::unique_ptr<Device> device,
             absl::Span<float> host_params, absl::Span<float> host_grads,
             bool per_unit)
      : layout_(std::move(layout)),
        device_(std::move(device)),
        host_params_(host_params),
        host_grads_(host_grads),
        per_unit_(per_unit) {}

  absl::Status Init(const Config& config, int B, int T, bool checkpoint,
                    const engine::UnitHook& unit_hook) {
    // The engine's buffers, which every step copies to and from: pinned
    // where the device can (a resident optimizer then leaves them alone).
    for (absl::Span<float> b : {host_params_, host_grads_}) {
      if (device_->PinHost(b.data(), b.size() * sizeof(float))) {
        pinned_.push_back(b.data());
      }
    }
    ModelOptions mo;
    mo.checkpoint = checkpoint;
    mo.device = device_.get();
    if (unit_hook) {
      const int L = config.num_layers;
      mo.param_hook = [this, hook = unit_hook, L](const ParamEvent& e) {
        const engine::UnitEvent u = ToUnitEvent(e, L);
        if (u.kind == engine::UnitEvent::Kind::kReleased) {
          ZS_RETURN_IF_ERROR(WaitUpload(u.unit));
          return hook(u);
        }
        ZS_RETURN_IF_ERROR(hook(u));
        return UpAsync(u.unit, u.range);
      };
    }
    ZS_ASSIGN_OR_RETURN(model_, gpt2::Model::Create(config, B, T, mo));
    return absl::OkStatus();
  }

  const engine::ModelLayout& layout() const override { return layout_; }

  ~DeviceGpt2() override {
    device_->Free(m_);
    device_->Free(v_);
    for (void* p : pinned_) device_->UnpinHost(p);
  }

  engine::ResidentOptimizer* resident_optimizer() override { return this; }

  // The engine's parameters may have changed: every unit goes up again.
  void BeginStep() override {
    stale_.assign(layout_.units.size(), true);
    fence_ = true;
  }

  absl::StatusOr<float> Forward(const engine::MicroBatch& batch) override {
    if (!per_unit_ && !resident_ && stale_[0]) {
      ZS_RETURN_IF_ERROR(Up(Range{0, layout_.num_params()}));
      stale_[0] = false;
    }
    absl::StatusOr<float> loss = model_->Forward(batch.tokens, batch.targets);
    if (!loss.ok()) {
      // No copy may read the engine's buffer after a failure: recovery
      // writes it.
      WaitCopies(0).IgnoreError();
    }
    return loss;
  }

  // Each segment's gradients go down on the device's copy stream as soon as
  // backward has enqueued their last kernel (ToHostAsync), and the engine's
  // hook sees a segment once its copy is done: at a later segment when it
  // already is, else after the last kernel is enqueued, in order — so the
  // engine's reductions and pushes of the first segments overlap the
  // device's work on the rest.
  absl::Status Backward(const engine::GradHook& hook) override {
    const int L = model_->config().num_layers;
    struct Pending {
      uint64_t ticket;
      engine::GradReady ready;
    };
    std::vector<Pending> pending;
    size_t delivered = 0;
    absl::Status copied;
    // Hooks for the copies done (all of them when `wait`), in order.
    const auto deliver = [&](bool wait) {
      for (; delivered < pending.size() && copied.ok(); ++delivered) {
        const Pending& p = pending[delivered];
        if (!wait && !device_->CopyDone(p.ticket)) return;
        copied = device_->WaitCopy(p.ticket);
        if (copied.ok() && hook) hook(p.ready);
      }
    };
    absl::Status s = model_->Backward([&](const GradSegment& seg) {
      const engine::GradReady ready{UnitIndex(seg.part, seg.layer, L),
                                    seg.range};
      if (resident_) {
        if (hook) hook(ready);
        return;
      }
      if (!copied.ok()) return;
      absl::StatusOr<uint64_t> ticket =
          device_->ToHostAsync(host_grads_.data() + seg.range.begin,
                               model_->grads().data() + seg.range.begin,
                               seg.range.size() * sizeof(float));
      if (!ticket.ok()) {
        copied = ticket.status();
        return;
      }
      pending.push_back(Pending{*ticket, ready});
      deliver(/*wait=*/false);
    });
    if (s.ok()) deliver(/*wait=*/true);
    // Nothing may still be copying into or out of the engine's buffers on
    // return (the next step's fetch writes the parameters).
    absl::Status all = WaitCopies(pending.empty() ? 0 : pending.back().ticket);
    if (copied.ok()) copied = all;
    ZS_RETURN_IF_ERROR(copied);
    return s;
  }

  // The engine's buffer is not zeroed: Backward's segments cover the
  // layout (the final norm, every block, the embeddings: model.h), so each
  // Backward copies every gradient down over it before the hook sees it.
  void ZeroGrad() override { model_->ZeroGrad(); }

  // engine::ResidentOptimizer
  absl::Status Enable() override {
    const size_t bytes = layout_.num_params() * sizeof(float);
    ZS_ASSIGN_OR_RETURN(void* m, device_->Alloc(bytes));
    m_ = static_cast<float*>(m);
    ZS_ASSIGN_OR_RETURN(void* v, device_->Alloc(bytes));
    v_ = static_cast<float*>(v);
    ZS_RETURN_IF_ERROR(Up(Range{0, layout_.num_params()}));
    resident_ = true;
    // The engine's buffers are not copied again: no need to lock them.
    for (void* p : pinned_) device_->UnpinHost(p);
    pinned_.clear();
    return absl::OkStatus();
  }
  absl::Status ScaleGrads(float s) override {
    return device_->Scale(model_->grads().data(), layout_.num_params(), s);
  }
  absl::StatusOr<double> GradSumSquares() override {
    return device_->SumSquares(model_->grads().data(), layout_.num_params());
  }
  absl::Status AdamW(absl::Span<const engine::TensorUpdate> updates) override {
    std::vector<Device::AdamWTask> tasks;
    tasks.reserve(updates.size());
    float* p = model_->params().data();
    const float* g = model_->grads().data();
    for (const engine::TensorUpdate& u : updates) {
      const uint64_t at = u.range.begin;
      tasks.push_back(Device::AdamWTask{u.hyper, p + at, g + at, m_ + at,
                                        v_ + at, u.range.size()});
    }
    return device_->AdamW(tasks);
  }
  absl::Status ReadParameters(absl::Span<float> out) override {
    if (out.size() != layout_.num_params()) {
      return absl::InvalidArgumentError("ReadParameters: wrong size");
    }
    return device_->ToHost(out.data(), model_->params().data(),
                           out.size() * sizeof(float));
  }

 private:
  absl::Status Up(Range r) {
    return device_->ToDevice(model_->params().data() + r.begin,
                             host_params_.data() + r.begin,
                             r.size() * sizeof(float));
  }

  // Unit `unit` (flat `r`) up on the copy stream unless it already went up
  // this step.
  absl::Status UpAsync(int unit, Range r) {
    if (!stale_[unit]) return absl::OkStatus();
    if (fence_) {
      ZS_RETURN_IF_ERROR(device_->UploadFence());
      fence_ = false;
    }
    ZS_ASSIGN_OR_RETURN(uint64_t ticket, device_->ToDeviceAsync(
                                             model_->params().data() + r.begin,
                                             host_params_.data() + r.begin,
                                             r.size() * sizeof(float)));
    stale_[unit] = false;
    uploads_[unit] = ticket;
    last_upload_ = ticket;
    return absl::OkStatus();
  }

  // Every copy up to `ticket` and every copy up done; none left to wait
  // for at a unit's release.
  absl::Status WaitCopies(uint64_t ticket) {
    const uint64_t last = std::max(ticket, std::exchange(last_upload_, 0));
    uploads_.assign(uploads_.size(), 0);
    return last == 0 ? absl::OkStatus() : device_->WaitCopy(last);
  }

  // Unit `unit`'s copy up done (the host's copy may change after this).
  absl::Status WaitUpload(int unit) {
    const uint64_t ticket = std::exchange(uploads_[unit], 0);
    return ticket == 0 ? absl::OkStatus() : device_->WaitCopy(ticket);
  }

  const engine::ModelLayout layout_;
  std::unique_ptr<Device> device_;  // outlives model_ (declared before it)
  std::unique_ptr<gpt2::Model> model_;
  absl::Span<float> host_params_, host_grads_;
  const bool per_unit_;
  bool resident_ = false;  // ResidentOptimizer enabled
  float* m_ = nullptr;     // AdamW moments on the device (resident)
  float* v_ = nullptr;
  std::vector<void*> pinned_;  // host buffers PinHost took
  // Per unit: not yet up this step (stage 0 without units: stale_[0] for
  // the whole buffer); the ticket of its copy up not yet waited for (0:
  // none). The step's first copy up is fenced behind the last step's work.
  std::vector<bool> stale_ = std::vector<bool>(layout_.units.size(), true);
  std::vector<uint64_t> uploads_ = std::vector<uint64_t>(layout_.units.size());
  uint64_t last_upload_ = 0;
  bool fence_ = true;
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

int UnitIndex(GradSegment::Part part, int layer, int num_layers) {
  switch (part) {
    case GradSegment::Part::kEmbeddings:
      return 0;
    case GradSegment::Part::kBlock:
      return 1 + layer;
    case GradSegment::Part::kFinalNorm:
      return num_layers + 1;
  }
  return 0;
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
      auto m = std::make_unique<DeviceGpt2>(layout, std::move(d), c.params,
                                            c.grads, c.unit_hook != nullptr);
      ZS_RETURN_IF_ERROR(m->Init(config, B, T, checkpoint, c.unit_hook));
      return std::unique_ptr<engine::Model>(std::move(m));
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
