// GPT-2 sequencing: which kernel runs on which buffers, forward and back.
//
// Residual stream: block l reads x_l and writes x_{l+1} = res2 + mlp(res2),
// res2 = x_l + attn(x_l). Backward keeps the stream's gradient in ONE buffer,
// dres: the residual adds pass it through unchanged to both branches, and
// each LayerNorm backward adds its input gradient into it, so the residual's
// backward needs no call of its own.
#include "worker/gpt2/model.h"

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <tuple>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "worker/gpt2/cpu_kernels.h"

namespace zeroshard::gpt2 {

absl::StatusOr<std::unique_ptr<Model>> Model::Create(
    const Config& config, int B, int T, const ModelOptions& options) {
  ZS_ASSIGN_OR_RETURN(ParamLayout layout, ParamLayout::Create(config));
  const uint64_t n = layout.num_params();
  for (const auto& [name, span] :
       {std::pair{"params", options.params}, {"grads", options.grads}}) {
    if (!span.empty() && span.size() != n) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "GPT-2 model: %s buffer has %d floats, the layout needs %d", name,
          span.size(), n));
    }
  }
  if (options.placed && (!options.params.empty() || !options.grads.empty())) {
    return absl::InvalidArgumentError(
        "GPT-2 model: a placed model takes no params or grads buffers");
  }
  std::unique_ptr<Model> m(new Model(std::move(layout), B, T));
  Device* device = options.device;
  if (device != nullptr && options.kernels != nullptr) {
    return absl::InvalidArgumentError(
        "GPT-2 model: give either a device or kernels, not both");
  }
  ZS_ASSIGN_OR_RETURN(m->arena_, ActivationArena::Create(
                                     config, B, T, options.checkpoint, device));
  m->checkpoint_ = options.checkpoint;
  m->param_hook_ = options.param_hook;
  m->device_ = device;
  if (device != nullptr) {
    m->kernels_ = &device->kernels();
    m->host_losses_.assign(static_cast<size_t>(B) * T, 0.0f);
  } else if (options.kernels != nullptr) {
    m->kernels_ = options.kernels;
  } else {
    ZS_ASSIGN_OR_RETURN(m->owned_kernels_, CpuKernels::Create(options.threads));
    m->kernels_ = m->owned_kernels_.get();
  }
  const int parts = config.num_layers + 2;
  m->part_params_.assign(parts, nullptr);
  m->part_grads_.assign(parts, nullptr);
  if (options.placed) {
    m->placed_ = true;
    return m;
  }
  // Model-owned buffers: host vectors, or one device allocation of both.
  const int owned = options.params.empty() + options.grads.empty();
  if (device != nullptr && owned > 0) {
    ZS_ASSIGN_OR_RETURN(void* p, device->Alloc(owned * n * sizeof(float)));
    m->device_owned_ = static_cast<float*>(p);
  }
  float* next = m->device_owned_;
  for (auto [span, vec, dst] :
       {std::tuple{options.params, &m->owned_params_, &m->params_},
        {options.grads, &m->owned_grads_, &m->grads_}}) {
    if (!span.empty()) {
      *dst = span;
    } else if (device != nullptr) {
      *dst = absl::MakeSpan(next, n);  // zeroed by Alloc
      next += n;
    } else {
      vec->assign(n, 0.0f);
      *dst = absl::MakeSpan(*vec);
    }
  }
  for (int i = 0; i < parts; ++i) {
    const uint64_t at = m->PartRange(i).begin;
    m->part_params_[i] = m->params_.data() + at;
    m->part_grads_[i] = m->grads_.data() + at;
  }
  return m;
}

Model::~Model() {
  arena_.reset();
  if (device_ != nullptr) device_->Free(device_owned_);
}

int Model::PartIndex(ParamKind kind, int layer) const {
  switch (kind) {
    case ParamKind::kWte:
    case ParamKind::kWpe:
      return 0;
    case ParamKind::kLnfw:
    case ParamKind::kLnfb:
      return config().num_layers + 1;
    default:
      return 1 + layer;
  }
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

Range Model::PartRange(int index) const {
  if (index == 0) return layout_.EmbeddingRange();
  if (index == config().num_layers + 1) return layout_.FinalNormRange();
  return layout_.LayerRange(index - 1);
}

void Model::Place(GradSegment::Part part, int layer, float* params,
                  float* grads) {
  if (!placed_) return;
  const int i = UnitIndex(part, layer, config().num_layers);
  part_params_[i] = params;
  part_grads_[i] = grads;
}

absl::Span<float> Model::param(ParamKind kind, int layer) {
  const ParamTensor& t = layout_.Get(kind, layer);
  float* p = const_cast<float*>(P(kind, layer));
  return p == nullptr ? absl::Span<float>() : absl::MakeSpan(p, t.numel);
}

absl::Span<float> Model::grad(ParamKind kind, int layer) {
  const ParamTensor& t = layout_.Get(kind, layer);
  float* g = G(kind, layer);
  return g == nullptr ? absl::Span<float>() : absl::MakeSpan(g, t.numel);
}

// The part's base pointer plus the tensor's offset in its part.
const float* Model::P(ParamKind kind, int layer) const {
  const int i = PartIndex(kind, layer);
  const float* base = part_params_[i];
  if (base == nullptr) return nullptr;
  return base + (layout_.Get(kind, layer).offset - PartRange(i).begin);
}

float* Model::G(ParamKind kind, int layer) {
  const int i = PartIndex(kind, layer);
  float* base = part_grads_[i];
  if (base == nullptr) return nullptr;
  return base + (layout_.Get(kind, layer).offset - PartRange(i).begin);
}

absl::Status Model::GradsPlaced(int index) const {
  if (part_grads_[index] != nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrFormat(
      "GPT-2 model: the gradients of part %d (0 the embeddings, 1 + l block "
      "l, %d the final norm) are not placed",
      index, config().num_layers + 1));
}

absl::Status Model::Params(ParamEvent::Kind kind, GradSegment::Part part,
                           int layer) {
  const int i = UnitIndex(part, layer, config().num_layers);
  if (param_hook_) {
    ZS_RETURN_IF_ERROR(
        param_hook_(ParamEvent{kind, part, layer, PartRange(i)}));
  }
  if (!placed_ || kind != ParamEvent::Kind::kNeeded) return absl::OkStatus();
  if (part_params_[i] != nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrFormat(
      "GPT-2 model: the parameters of part %d (0 the embeddings, 1 + l block "
      "l, %d the final norm) are needed but not placed",
      i, config().num_layers + 1));
}

absl::Span<const float> Model::logits() const {
  return {arena_->acts().logits,
          static_cast<size_t>(B_) * T_ * config().padded_vocab_size};
}

absl::Span<const float> Model::losses() const {
  if (device_ != nullptr) return host_losses_;
  return {arena_->acts().losses, static_cast<size_t>(B_) * T_};
}

void Model::ZeroGrad() {
  if (!placed_) {
    kernels_->Zero(grads_.data(), static_cast<int64_t>(grads_.size()));
    return;
  }
  for (size_t i = 0; i < part_grads_.size(); ++i) {
    if (part_grads_[i] == nullptr) continue;
    kernels_->Zero(part_grads_[i],
                   static_cast<int64_t>(PartRange(static_cast<int>(i)).size()));
  }
}

absl::StatusOr<float> Model::Forward(absl::Span<const int> inputs,
                                     absl::Span<const int> targets) {
  const size_t bt = static_cast<size_t>(B_) * T_;
  const int V = config().vocab_size;
  for (const auto& [name, tokens] :
       {std::pair{"inputs", inputs}, {"targets", targets}}) {
    if (tokens.empty() && std::string_view(name) == "targets") continue;
    if (tokens.size() != bt) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "GPT-2 forward: %s has %d tokens, expected B*T = %d*%d", name,
          tokens.size(), B_, T_));
    }
    for (size_t i = 0; i < bt; ++i) {
      if (tokens[i] < 0 || tokens[i] >= V) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "GPT-2 forward: %s token %d at position (b=%d, t=%d) is outside "
            "[0, vocab_size=%d)",
            name, tokens[i], i / T_, i % T_, V));
      }
    }
  }
  const Activations& a = arena_->acts();
  if (device_ != nullptr) {
    ZS_RETURN_IF_ERROR(
        device_->ToDevice(a.inputs, inputs.data(), bt * sizeof(int)));
    if (!targets.empty()) {
      ZS_RETURN_IF_ERROR(
          device_->ToDevice(a.targets, targets.data(), bt * sizeof(int)));
    }
  } else {
    std::copy(inputs.begin(), inputs.end(), a.inputs);
    std::copy(targets.begin(), targets.end(), a.targets);
  }

  const Config& c = config();
  const int C = c.channels, L = c.num_layers;
  const int64_t N = static_cast<int64_t>(bt);
  Kernels& k = *kernels_;
  using E = ParamEvent::Kind;
  using Part = GradSegment::Part;
  backward_ready_ = false;
  logits_valid_ = false;
  cached_block_ = -1;
  ZS_RETURN_IF_ERROR(Params(E::kNeeded, Part::kEmbeddings));
  k.EncoderForward(a.x, a.inputs, P(ParamKind::kWte), P(ParamKind::kWpe), B_,
                   T_, C);
  ZS_RETURN_IF_ERROR(Params(E::kReleased, Part::kEmbeddings));
  for (int l = 0; l < L; ++l) {
    ZS_RETURN_IF_ERROR(Params(E::kNeeded, Part::kBlock, l));
    BlockForward(l, a.blocks[checkpoint_ ? 0 : l]);
    ZS_RETURN_IF_ERROR(Params(E::kReleased, Part::kBlock, l));
  }
  cached_block_ = L - 1;
  ZS_RETURN_IF_ERROR(Params(E::kNeeded, Part::kFinalNorm));
  ZS_RETURN_IF_ERROR(Params(E::kNeeded, Part::kEmbeddings));
  k.LayernormForward(a.lnf, a.lnf_mean, a.lnf_rstd, a.x + L * N * C,
                     P(ParamKind::kLnfw), P(ParamKind::kLnfb), N, C);
  k.MatmulForward(a.logits, a.lnf, P(ParamKind::kWte), nullptr, N, C,
                  c.padded_vocab_size);
  logits_valid_ = true;
  backward_ready_ = !targets.empty();
  loss_ = 0;
  if (backward_ready_) {
    k.CrossEntropyForward(a.losses, a.logits, a.targets, N, V,
                          c.padded_vocab_size);
    const float* losses = a.losses;
    if (device_ != nullptr) {
      ZS_RETURN_IF_ERROR(
          device_->ToHost(host_losses_.data(), a.losses, bt * sizeof(float)));
      losses = host_losses_.data();
    }
    double sum = 0;
    for (int64_t i = 0; i < N; ++i) sum += losses[i];
    loss_ = static_cast<float>(sum / N);
  }
  if (device_ != nullptr) ZS_RETURN_IF_ERROR(device_->status());
  ZS_RETURN_IF_ERROR(Params(E::kReleased, Part::kEmbeddings));
  ZS_RETURN_IF_ERROR(Params(E::kReleased, Part::kFinalNorm));
  return loss_;
}

void Model::BlockForward(int l, const BlockActs& s) {
  const int C = config().channels, NH = config().num_heads;
  const int64_t N = int64_t{B_} * T_;
  const float* x = arena_->acts().x + l * N * C;
  float* out = arena_->acts().x + (l + 1) * N * C;
  Kernels& k = *kernels_;
  using K = ParamKind;
  k.LayernormForward(s.ln1, s.ln1_mean, s.ln1_rstd, x, P(K::kLn1w, l),
                     P(K::kLn1b, l), N, C);
  k.MatmulForward(s.qkv, s.ln1, P(K::kQkvw, l), P(K::kQkvb, l), N, C, 3 * C);
  k.AttentionForward(s.atty, s.att, s.qkv, B_, T_, C, NH);
  k.MatmulForward(s.res2, s.atty, P(K::kAttprojw, l), P(K::kAttprojb, l), N, C,
                  C);
  k.ResidualForward(s.res2, x, s.res2, N * C);
  k.LayernormForward(s.ln2, s.ln2_mean, s.ln2_rstd, s.res2, P(K::kLn2w, l),
                     P(K::kLn2b, l), N, C);
  k.MatmulForward(s.fch, s.ln2, P(K::kFcw, l), P(K::kFcb, l), N, C, 4 * C);
  k.GeluForward(s.fch_gelu, s.fch, N * 4 * C);
  k.MatmulForward(out, s.fch_gelu, P(K::kFcprojw, l), P(K::kFcprojb, l), N,
                  4 * C, C);
  k.ResidualForward(out, s.res2, out, N * C);
}

absl::Status Model::Backward(const GradHook& hook) {
  if (!backward_ready_) {
    return absl::FailedPreconditionError(
        "GPT-2 backward: needs a Forward with targets first (and only one "
        "Backward per Forward)");
  }
  backward_ready_ = false;
  logits_valid_ = false;
  const Config& c = config();
  const int C = c.channels, L = c.num_layers, Vp = c.padded_vocab_size;
  const int64_t N = int64_t{B_} * T_;
  const Activations& a = arena_->acts();
  Kernels& k = *kernels_;
  auto announce = [&](GradSegment::Part part, int layer, Range range) {
    if (hook) hook(GradSegment{part, layer, range});
  };
  using E = ParamEvent::Kind;
  using Part = GradSegment::Part;
  ZS_RETURN_IF_ERROR(Params(E::kNeeded, Part::kFinalNorm));
  ZS_RETURN_IF_ERROR(Params(E::kNeeded, Part::kEmbeddings));
  ZS_RETURN_IF_ERROR(GradsPlaced(0));
  ZS_RETURN_IF_ERROR(GradsPlaced(L + 1));

  // LM head (tied to wte) and the final LayerNorm.
  k.CrossEntropyBackward(a.logits, a.logits, a.targets, 1.0f / N, N,
                         c.vocab_size, Vp);
  k.MatmulBackward(a.dc, G(ParamKind::kWte), nullptr, a.logits, a.lnf,
                   P(ParamKind::kWte), N, C, Vp);
  k.Zero(a.dres, N * C);
  k.LayernormBackward(a.dres, G(ParamKind::kLnfw), G(ParamKind::kLnfb), a.dc,
                      a.x + L * N * C, P(ParamKind::kLnfw), a.lnf_mean,
                      a.lnf_rstd, N, C);
  ZS_RETURN_IF_ERROR(Params(E::kReleased, Part::kEmbeddings));
  ZS_RETURN_IF_ERROR(Params(E::kReleased, Part::kFinalNorm));
  announce(GradSegment::Part::kFinalNorm, -1, layout_.FinalNormRange());

  for (int l = L - 1; l >= 0; --l) {
    const BlockActs& s = a.blocks[checkpoint_ ? 0 : l];
    ZS_RETURN_IF_ERROR(Params(E::kNeeded, Part::kBlock, l));
    ZS_RETURN_IF_ERROR(GradsPlaced(1 + l));
    if (checkpoint_ && cached_block_ != l) BlockForward(l, s);
    cached_block_ = l;
    BlockBackward(l, s);
    ZS_RETURN_IF_ERROR(Params(E::kReleased, Part::kBlock, l));
    announce(GradSegment::Part::kBlock, l, layout_.LayerRange(l));
  }

  ZS_RETURN_IF_ERROR(GradsPlaced(0));
  k.EncoderBackward(G(ParamKind::kWte), G(ParamKind::kWpe), a.dres, a.inputs,
                    B_, T_, C);
  announce(GradSegment::Part::kEmbeddings, -1, layout_.EmbeddingRange());
  if (device_ != nullptr) return device_->status();
  return absl::OkStatus();
}

// On entry a.dres holds d loss / d x_{l+1}; on return d loss / d x_l.
void Model::BlockBackward(int l, const BlockActs& s) {
  const int C = config().channels, NH = config().num_heads;
  const int64_t N = int64_t{B_} * T_;
  const Activations& a = arena_->acts();
  const float* x = a.x + l * N * C;
  Kernels& k = *kernels_;
  using K = ParamKind;
  // MLP: x_{l+1} = res2 + fcproj(gelu(fc(ln2(res2)))).
  k.MatmulBackward(a.d4c, G(K::kFcprojw, l), G(K::kFcprojb, l), a.dres,
                   s.fch_gelu, P(K::kFcprojw, l), N, 4 * C, C);
  k.GeluBackward(a.d4c, s.fch, a.d4c, N * 4 * C);
  k.MatmulBackward(a.dc, G(K::kFcw, l), G(K::kFcb, l), a.d4c, s.ln2,
                   P(K::kFcw, l), N, C, 4 * C);
  k.LayernormBackward(a.dres, G(K::kLn2w, l), G(K::kLn2b, l), a.dc, s.res2,
                      P(K::kLn2w, l), s.ln2_mean, s.ln2_rstd, N, C);
  // Attention: res2 = x_l + attproj(attention(qkv(ln1(x_l)))).
  k.MatmulBackward(a.dc, G(K::kAttprojw, l), G(K::kAttprojb, l), a.dres, s.atty,
                   P(K::kAttprojw, l), N, C, C);
  k.AttentionBackward(a.d4c, a.dc, s.qkv, s.att, B_, T_, C, NH);
  k.MatmulBackward(a.dc, G(K::kQkvw, l), G(K::kQkvb, l), a.d4c, s.ln1,
                   P(K::kQkvw, l), N, C, 3 * C);
  k.LayernormBackward(a.dres, G(K::kLn1w, l), G(K::kLn1b, l), a.dc, x,
                      P(K::kLn1w, l), s.ln1_mean, s.ln1_rstd, N, C);
}

}  // namespace zeroshard::gpt2
