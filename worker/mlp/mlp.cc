#include "worker/mlp/mlp.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/seeded_random.h"
#include "common/status_macros.h"

namespace zeroshard::mlp {
namespace {

// Layer l maps `in` features to `out`.
struct Dims {
  int in, out;
};

std::vector<Dims> LayerDims(const MlpConfig& c) {
  std::vector<Dims> d;
  int in = c.inputs;
  for (int h : c.hidden) {
    d.push_back({in, h});
    in = h;
  }
  d.push_back({in, c.classes});
  return d;
}

// y (B, out) = x (B, in) · W^T (in, out) + b (out).
void LinearForward(const float* x, const float* W, const float* b, float* y,
                   int B, const Dims& d) {
  for (int r = 0; r < B; ++r) {
    for (int o = 0; o < d.out; ++o) {
      float acc = b[o];
      const float* w = W + static_cast<size_t>(o) * d.in;
      const float* xr = x + static_cast<size_t>(r) * d.in;
      for (int i = 0; i < d.in; ++i) acc += xr[i] * w[i];
      y[static_cast<size_t>(r) * d.out + o] = acc;
    }
  }
}

// dW (out, in) += dy^T · x; db (out) += Σ_rows dy; dx (B, in) = dy · W
// (when dx is not null).
void LinearBackward(const float* x, const float* W, const float* dy, float* dW,
                    float* db, float* dx, int B, const Dims& d) {
  for (int o = 0; o < d.out; ++o) {
    float* dw = dW + static_cast<size_t>(o) * d.in;
    float bias = 0;
    for (int r = 0; r < B; ++r) {
      const float g = dy[static_cast<size_t>(r) * d.out + o];
      const float* xr = x + static_cast<size_t>(r) * d.in;
      for (int i = 0; i < d.in; ++i) dw[i] += g * xr[i];
      bias += g;
    }
    db[o] += bias;
  }
  if (dx == nullptr) return;
  for (int r = 0; r < B; ++r) {
    for (int i = 0; i < d.in; ++i) {
      float acc = 0;
      for (int o = 0; o < d.out; ++o) {
        acc += dy[static_cast<size_t>(r) * d.out + o] *
               W[static_cast<size_t>(o) * d.in + i];
      }
      dx[static_cast<size_t>(r) * d.in + i] = acc;
    }
  }
}

class Mlp : public engine::Model {
 public:
  Mlp(MlpConfig config, int B, engine::ModelLayout layout,
      const engine::ModelContext& c)
      : config_(std::move(config)),
        B_(B),
        dims_(LayerDims(config_)),
        layout_(std::move(layout)),
        params_(c.params),
        grads_(c.grads),
        hook_(c.unit_hook) {
    for (const Dims& d : dims_) {
      x_.emplace_back(static_cast<size_t>(B) * d.in);
    }
    logits_.resize(static_cast<size_t>(B) * config_.classes);
    probs_.resize(logits_.size());
  }

  const engine::ModelLayout& layout() const override { return layout_; }

  absl::StatusOr<float> Forward(const engine::MicroBatch& batch) override {
    ZS_RETURN_IF_ERROR(CheckBatch(batch));
    forwarded_ = false;
    std::copy(batch.features.begin(), batch.features.end(), x_[0].begin());
    labels_.assign(batch.targets.begin(), batch.targets.end());
    const int n = static_cast<int>(dims_.size());
    std::vector<float> y;
    for (int l = 0; l < n; ++l) {
      ZS_RETURN_IF_ERROR(Unit(engine::UnitEvent::Kind::kNeeded, l));
      float* out = l + 1 < n ? x_[l + 1].data() : logits_.data();
      LinearForward(x_[l].data(), W(l), b(l), out, B_, dims_[l]);
      if (l + 1 < n) {  // tanh in place
        for (float& v : x_[l + 1]) v = std::tanh(v);
      }
      ZS_RETURN_IF_ERROR(Unit(engine::UnitEvent::Kind::kReleased, l));
    }
    // Softmax cross-entropy, row by row; the mean over rows.
    const int C = config_.classes;
    double total = 0;
    for (int r = 0; r < B_; ++r) {
      const float* z = logits_.data() + static_cast<size_t>(r) * C;
      float* p = probs_.data() + static_cast<size_t>(r) * C;
      const float m = *std::max_element(z, z + C);
      float sum = 0;
      for (int k = 0; k < C; ++k) sum += p[k] = std::exp(z[k] - m);
      for (int k = 0; k < C; ++k) p[k] /= sum;
      total += static_cast<double>(m + std::log(sum) - z[labels_[r]]);
    }
    forwarded_ = true;
    return static_cast<float>(total / B_);
  }

  absl::Status Backward(const engine::GradHook& hook) override {
    if (!forwarded_) {
      return absl::FailedPreconditionError(
          "MLP Backward without a Forward since the last Backward");
    }
    forwarded_ = false;
    const int n = static_cast<int>(dims_.size());
    // d(loss)/d(logits) = (softmax - onehot) / B.
    std::vector<float> dy(probs_.size());
    for (int r = 0; r < B_; ++r) {
      for (int k = 0; k < config_.classes; ++k) {
        const size_t at = static_cast<size_t>(r) * config_.classes + k;
        dy[at] = (probs_[at] - (k == labels_[r] ? 1.0f : 0.0f)) /
                 static_cast<float>(B_);
      }
    }
    std::vector<float> dx;
    for (int l = n - 1; l >= 0; --l) {
      ZS_RETURN_IF_ERROR(Unit(engine::UnitEvent::Kind::kNeeded, l));
      const Dims& d = dims_[l];
      dx.assign(l > 0 ? static_cast<size_t>(B_) * d.in : 0, 0.0f);
      LinearBackward(x_[l].data(), W(l), dy.data(), dW(l), db(l),
                     l > 0 ? dx.data() : nullptr, B_, d);
      ZS_RETURN_IF_ERROR(Unit(engine::UnitEvent::Kind::kReleased, l));
      if (hook) hook(engine::GradReady{l, layout_.units[l]});
      if (l == 0) break;
      // Through tanh: x_l = tanh(·), so d(·) = dx · (1 - x_l²).
      for (size_t i = 0; i < dx.size(); ++i) {
        dx[i] *= 1.0f - x_[l][i] * x_[l][i];
      }
      dy.swap(dx);
    }
    return absl::OkStatus();
  }

  void ZeroGrad() override { std::fill(grads_.begin(), grads_.end(), 0.0f); }

 private:
  absl::Status CheckBatch(const engine::MicroBatch& batch) const {
    const size_t rows = static_cast<size_t>(B_);
    if (batch.features.size() != rows * config_.inputs ||
        batch.targets.size() != rows) {
      return absl::InvalidArgumentError(absl::StrCat(
          "MLP micro-batch: ", batch.features.size(), " features and ",
          batch.targets.size(), " labels, expected ", rows * config_.inputs,
          " and ", rows));
    }
    for (size_t r = 0; r < rows; ++r) {
      if (batch.targets[r] < 0 || batch.targets[r] >= config_.classes) {
        return absl::InvalidArgumentError(absl::StrCat(
            "MLP micro-batch: row ", r, " has label ", batch.targets[r],
            " outside [0, ", config_.classes, ")"));
      }
    }
    return absl::OkStatus();
  }
  absl::Status Unit(engine::UnitEvent::Kind kind, int l) {
    if (!hook_) return absl::OkStatus();
    return hook_(engine::UnitEvent{kind, l, layout_.units[l]});
  }
  const float* W(int l) const { return params_.data() + Tensor(2 * l).begin; }
  const float* b(int l) const {
    return params_.data() + Tensor(2 * l + 1).begin;
  }
  float* dW(int l) { return grads_.data() + Tensor(2 * l).begin; }
  float* db(int l) { return grads_.data() + Tensor(2 * l + 1).begin; }
  const Range& Tensor(int t) const { return layout_.tensors[t].range; }

  const MlpConfig config_;
  const int B_;
  const std::vector<Dims> dims_;
  const engine::ModelLayout layout_;
  absl::Span<float> params_, grads_;
  const engine::UnitHook hook_;
  std::vector<std::vector<float>> x_;  // each layer's input (B, in)
  std::vector<float> logits_, probs_;  // (B, C)
  std::vector<int> labels_;
  bool forwarded_ = false;
};

}  // namespace

absl::Status ValidateMlpConfig(const MlpConfig& c) {
  auto check = [](const std::string& name, int v) {
    if (v >= 1 && v <= (1 << 16)) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("MLP ", name, " is ", v, ", not in [1, 65536]"));
  };
  ZS_RETURN_IF_ERROR(check("inputs", c.inputs));
  ZS_RETURN_IF_ERROR(check("classes", c.classes));
  for (size_t i = 0; i < c.hidden.size(); ++i) {
    ZS_RETURN_IF_ERROR(check(absl::StrCat("hidden[", i, "]"), c.hidden[i]));
  }
  return absl::OkStatus();
}

absl::StatusOr<engine::ModelLayout> MlpLayout(const MlpConfig& config) {
  ZS_RETURN_IF_ERROR(ValidateMlpConfig(config));
  std::vector<TensorDesc> tensors;
  std::vector<int> units, schedule;
  const std::vector<Dims> dims = LayerDims(config);
  for (size_t l = 0; l < dims.size(); ++l) {
    tensors.push_back(
        {absl::StrCat("l", l, ".weight"), {dims[l].out, dims[l].in}, 0});
    tensors.push_back({absl::StrCat("l", l, ".bias"), {dims[l].out}, 1});
    units.push_back(2);
    schedule.push_back(static_cast<int>(l));
  }
  for (size_t l = dims.size(); l-- > 0;)
    schedule.push_back(static_cast<int>(l));
  return engine::MakeModelLayout(tensors, units, std::move(schedule));
}

absl::StatusOr<engine::ModelDef> MlpModel(const MlpConfig& config, int batch) {
  if (batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("MLP micro-batch of ", batch, " rows"));
  }
  engine::ModelDef def;
  ZS_ASSIGN_OR_RETURN(def.layout, MlpLayout(config));
  def.create = [config, batch,
                layout = def.layout](const engine::ModelContext& c)
      -> absl::StatusOr<std::unique_ptr<engine::Model>> {
    if (c.params.size() != layout.num_params() ||
        c.grads.size() != layout.num_params()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "MLP buffers of ", c.params.size(), " and ", c.grads.size(),
          " floats, the model has ", layout.num_params()));
    }
    return std::unique_ptr<engine::Model>(new Mlp(config, batch, layout, c));
  };
  return def;
}

std::vector<float> MlpInitialParams(const engine::ModelLayout& layout,
                                    uint64_t seed) {
  std::vector<float> p(layout.num_params(), 0.0f);
  for (const TensorInfo& t : layout.tensors) {
    if (t.desc.param_group != 0) continue;  // biases start at 0
    const double std = 1.0 / std::sqrt(static_cast<double>(t.desc.shape[1]));
    for (uint64_t i = t.range.begin; i < t.range.end; ++i) {
      const uint64_t a = SplitMix64(seed * 0x9E3779B97F4A7C15ull + 2 * i);
      const uint64_t b = SplitMix64(seed * 0x9E3779B97F4A7C15ull + 2 * i + 1);
      p[i] = static_cast<float>(BoxMullerNormal(a, b) * std);
    }
  }
  return p;
}

}  // namespace zeroshard::mlp
