#include "worker/gpt2/device_model.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "worker/gpt2/engine_model.h"
#include "worker/gpt2/model.h"

namespace zeroshard::gpt2 {
namespace {

// Floats rounded up to whole 64-byte lines, so that every slot begins as
// aligned as the flat buffer's tensors do.
uint64_t Lines(uint64_t floats) { return (floats + 15) / 16 * 16; }

class DeviceGpt2 : public engine::Model, public engine::ResidentOptimizer {
 public:
  DeviceGpt2(engine::ModelLayout layout, std::unique_ptr<Device> device,
             const engine::ModelContext& c)
      : layout_(std::move(layout)),
        device_(std::move(device)),
        host_params_(c.params),
        host_grads_(c.grads),
        per_unit_(c.unit_hook != nullptr) {}

  absl::Status Init(const Config& config, int B, int T, bool checkpoint,
                    const engine::UnitHook& unit_hook, uint64_t max_live) {
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
    mo.placed = per_unit_;
    const int L = config.num_layers;
    if (per_unit_) {
      mo.param_hook = [this, hook = unit_hook, L](const ParamEvent& e) {
        const engine::UnitEvent u = ToUnitEvent(e, L);
        if (u.kind == engine::UnitEvent::Kind::kReleased) {
          ZS_RETURN_IF_ERROR(Release(u.unit));
          return hook(u);
        }
        ZS_RETURN_IF_ERROR(hook(u));
        return Need(u.unit, u.range);
      };
    }
    ZS_ASSIGN_OR_RETURN(model_, gpt2::Model::Create(config, B, T, mo));
    if (per_unit_) return MakeSlots(L, max_live);
    device_bytes_ = 2 * layout_.num_params() * sizeof(float);
    return absl::OkStatus();
  }

  const engine::ModelLayout& layout() const override { return layout_; }
  uint64_t device_bytes() const override { return device_bytes_; }
  uint64_t activation_bytes() const override {
    return static_cast<uint64_t>(model_->activation_floats()) * sizeof(float);
  }

  ~DeviceGpt2() override {
    model_.reset();  // it points into the slots freed below
    device_->Free(m_);
    device_->Free(v_);
    device_->Free(slot_memory_);
    for (void* p : pinned_) device_->UnpinHost(p);
  }

  // Stage 0 only: with units the parameters live in slots.
  engine::ResidentOptimizer* resident_optimizer() override {
    return per_unit_ ? nullptr : this;
  }

  // The engine's parameters may have changed: every unit goes up again.
  void BeginStep() override {
    stale_.assign(layout_.units.size(), true);
    in_use_.assign(layout_.units.size(), false);
  }

  absl::StatusOr<float> Forward(const engine::MicroBatch& batch) override {
    in_use_.assign(layout_.units.size(), false);  // a failed pass's needs
    if (!per_unit_ && !resident_ && stale_[0]) {
      ZS_RETURN_IF_ERROR(
          device_->ToDevice(model_->params().data(), host_params_.data(),
                            host_params_.size() * sizeof(float)));
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
  // hook sees a segment when the next one is announced (waiting for its
  // copy then), the last after backward — so the engine's reductions and
  // pushes of a segment overlap the device's work on the next. The point
  // is fixed, never "when the copy happens to be done": at stage 3 the
  // unit hook issues collectives too, and every rank must issue its
  // collectives in the same order.
  absl::Status Backward(const engine::GradHook& hook) override {
    const int L = model_->config().num_layers;
    struct Pending {
      uint64_t ticket;
      engine::GradReady ready;
    };
    std::vector<Pending> pending;
    size_t delivered = 0;
    absl::Status copied;
    // Hooks for the first `upto` segments, in order, each after its copy.
    const auto deliver = [&](size_t upto) {
      for (; delivered < upto && copied.ok(); ++delivered) {
        const Pending& p = pending[delivered];
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
      absl::StatusOr<uint64_t> ticket = GradsDown(ready.unit, seg.range);
      if (!ticket.ok()) {
        copied = ticket.status();
        return;
      }
      pending.push_back(Pending{*ticket, ready});
      deliver(pending.size() - 1);
    });
    if (s.ok()) deliver(pending.size());
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
  // With slots: the gradients of the units in them (a unit placed later
  // starts at zero).
  void ZeroGrad() override { model_->ZeroGrad(); }

  // engine::ResidentOptimizer
  absl::Status Enable() override {
    const size_t bytes = layout_.num_params() * sizeof(float);
    ZS_ASSIGN_OR_RETURN(void* m, device_->Alloc(bytes));
    m_ = static_cast<float*>(m);
    ZS_ASSIGN_OR_RETURN(void* v, device_->Alloc(bytes));
    v_ = static_cast<float*>(v);
    device_bytes_ += 2 * bytes;
    ZS_RETURN_IF_ERROR(
        device_->ToDevice(model_->params().data(), host_params_.data(), bytes));
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
  // A unit's place in device memory: its parameters, its gradients beside
  // them.
  struct Slot {
    float* params = nullptr;
    float* grads = nullptr;
    int unit = -1;            // the occupant; -1: free
    uint64_t mark = 0;        // Device::Mark at the occupant's last release
    uint64_t released = 0;    // clock_ then (the oldest is reused first)
    uint64_t grads_down = 0;  // the occupant's gradients' copy down
  };

  // The embeddings (unit 0) and the final norm (unit L + 1) in slots of
  // their own, the blocks in a pool of S (file comment), all in one
  // allocation.
  absl::Status MakeSlots(int L, uint64_t max_live) {
    const std::vector<Range>& units = layout_.units;
    const uint64_t block = L > 0 ? units[1].size() : 0;
    const uint64_t fixed = units[0].size() + units[L + 1].size();
    const uint64_t room = max_live > fixed ? max_live - fixed : 0;
    const uint64_t pool =
        block == 0 ? 0 : std::clamp<uint64_t>(room / block, std::min(2, L), L);
    std::vector<uint64_t> sizes = {units[0].size(), units[L + 1].size()};
    sizes.insert(sizes.end(), pool, block);
    uint64_t floats = 0;
    for (uint64_t n : sizes) floats += 2 * Lines(n);
    device_bytes_ = floats * sizeof(float);
    ZS_ASSIGN_OR_RETURN(void* memory, device_->Alloc(device_bytes_));
    slot_memory_ = static_cast<float*>(memory);
    float* next = slot_memory_;
    slots_.resize(sizes.size());
    for (size_t i = 0; i < sizes.size(); ++i) {
      slots_[i].params = next;
      slots_[i].grads = next + Lines(sizes[i]);
      next += 2 * Lines(sizes[i]);
    }
    slot_of_.assign(units.size(), -1);
    Occupy(0, 0);
    Occupy(1, L + 1);
    return absl::OkStatus();
  }

  // Slot `slot` holds unit `unit` from now on (its gradients as they are).
  void Occupy(int slot, int unit) {
    slots_[slot].unit = unit;
    slot_of_[unit] = slot;
    Place(unit, slots_[slot].params, slots_[slot].grads);
    stale_[unit] = true;
  }

  // Tells the model where unit `unit` is (null: nowhere).
  void Place(int unit, float* params, float* grads) {
    const int L = model_->config().num_layers;
    if (unit == 0) {
      model_->Place(GradSegment::Part::kEmbeddings, -1, params, grads);
    } else if (unit == L + 1) {
      model_->Place(GradSegment::Part::kFinalNorm, -1, params, grads);
    } else {
      model_->Place(GradSegment::Part::kBlock, unit - 1, params, grads);
    }
  }

  // Unit `unit` (flat `r`) about to be read: in a slot, and its parameters
  // on their way up unless they went up this step.
  absl::Status Need(int unit, Range r) {
    if (slot_of_[unit] < 0) ZS_RETURN_IF_ERROR(TakeSlot(unit));
    in_use_[unit] = true;
    Slot& s = slots_[slot_of_[unit]];
    if (!stale_[unit]) return absl::OkStatus();
    ZS_ASSIGN_OR_RETURN(
        uint64_t ticket,
        device_->ToDeviceAsync(s.params, host_params_.data() + r.begin,
                               r.size() * sizeof(float), s.mark));
    stale_[unit] = false;
    uploads_[unit] = ticket;
    last_upload_ = ticket;
    return absl::OkStatus();
  }

  // A pool slot for block unit `unit`: a free one, else the one released
  // longest ago whose occupant is not in use; its gradients zeroed.
  absl::Status TakeSlot(int unit) {
    int pick = -1;
    for (int i = 2; i < static_cast<int>(slots_.size()); ++i) {
      const Slot& s = slots_[i];
      if (s.unit < 0) {
        pick = i;
        break;
      }
      if (!in_use_[s.unit] &&
          (pick < 0 || s.released < slots_[pick].released)) {
        pick = i;
      }
    }
    if (pick < 0) {
      return absl::InternalError(absl::StrFormat(
          "GPT-2 on the device: unit %d needs a slot, and all %d block slots "
          "hold units in use",
          unit, slots_.size() - 2));
    }
    Slot& s = slots_[pick];
    if (s.unit >= 0) {
      // The zeroing below must not race the old gradients' copy down.
      if (s.grads_down != 0) {
        ZS_RETURN_IF_ERROR(device_->WaitCopy(std::exchange(s.grads_down, 0)));
      }
      ZS_RETURN_IF_ERROR(WaitUpload(s.unit));
      Place(s.unit, nullptr, nullptr);
      slot_of_[s.unit] = -1;
    }
    Occupy(pick, unit);
    const Range& r = layout_.units[unit];
    device_->kernels().Zero(s.grads, static_cast<int64_t>(r.size()));
    return device_->status();
  }

  // Unit `unit` read for the last time until its next need: its copy up
  // done (the host's copy may change after this) and its slot's mark past
  // its kernels.
  absl::Status Release(int unit) {
    ZS_RETURN_IF_ERROR(WaitUpload(unit));
    in_use_[unit] = false;
    Slot& s = slots_[slot_of_[unit]];
    ZS_ASSIGN_OR_RETURN(s.mark, device_->Mark(s.mark));
    s.released = ++clock_;
    return absl::OkStatus();
  }

  // Unit `unit`'s gradients (flat `r`) down to the engine's buffer.
  absl::StatusOr<uint64_t> GradsDown(int unit, Range r) {
    float* dst = host_grads_.data() + r.begin;
    const size_t bytes = r.size() * sizeof(float);
    if (!per_unit_) {
      return device_->ToHostAsync(dst, model_->grads().data() + r.begin, bytes);
    }
    if (slot_of_[unit] < 0) {
      return absl::InternalError(absl::StrFormat(
          "GPT-2 on the device: unit %d's gradients are final but it holds "
          "no slot",
          unit));
    }
    Slot& s = slots_[slot_of_[unit]];
    ZS_ASSIGN_OR_RETURN(s.grads_down,
                        device_->ToHostAsync(dst, s.grads, bytes));
    return s.grads_down;
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
  uint64_t device_bytes_ = 0;  // parameters, gradients (and m, v)
  // With units: the slots (0 the embeddings', 1 the final norm's, then the
  // blocks'), in slot_memory_; per unit its slot (-1: none) and whether it
  // is between its need and its release.
  float* slot_memory_ = nullptr;
  std::vector<Slot> slots_;
  std::vector<int> slot_of_;
  std::vector<bool> in_use_ = std::vector<bool>(layout_.units.size(), false);
  uint64_t clock_ = 0;
  // Per unit: not yet up this step (stage 0: stale_[0] for the whole
  // buffer); the ticket of its copy up not yet waited for (0: none).
  std::vector<bool> stale_ = std::vector<bool>(layout_.units.size(), true);
  std::vector<uint64_t> uploads_ = std::vector<uint64_t>(layout_.units.size());
  uint64_t last_upload_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<engine::Model>> CreateDeviceModel(
    engine::ModelLayout layout, std::unique_ptr<Device> device,
    const Config& config, int B, int T, bool checkpoint,
    const engine::ModelContext& context) {
  auto m = std::make_unique<DeviceGpt2>(std::move(layout), std::move(device),
                                        context);
  ZS_RETURN_IF_ERROR(m->Init(config, B, T, checkpoint, context.unit_hook,
                             context.max_live_params));
  return std::unique_ptr<engine::Model>(std::move(m));
}

}  // namespace zeroshard::gpt2
