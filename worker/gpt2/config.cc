#include "worker/gpt2/config.h"

#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace zeroshard::gpt2 {
namespace {

constexpr ParamKind kBlockKinds[] = {
    ParamKind::kLn1w, ParamKind::kLn1b,     ParamKind::kQkvw,
    ParamKind::kQkvb, ParamKind::kAttprojw, ParamKind::kAttprojb,
    ParamKind::kLn2w, ParamKind::kLn2b,     ParamKind::kFcw,
    ParamKind::kFcb,  ParamKind::kFcprojw,  ParamKind::kFcprojb};
constexpr int kKindsPerBlock = 12;

std::vector<int64_t> ShapeOf(ParamKind kind, const Config& c) {
  const int64_t C = c.channels;
  switch (kind) {
    case ParamKind::kWte:
      return {c.padded_vocab_size, C};
    case ParamKind::kWpe:
      return {c.max_seq_len, C};
    case ParamKind::kQkvw:
      return {3 * C, C};
    case ParamKind::kQkvb:
      return {3 * C};
    case ParamKind::kAttprojw:
      return {C, C};
    case ParamKind::kFcw:
      return {4 * C, C};
    case ParamKind::kFcb:
      return {4 * C};
    case ParamKind::kFcprojw:
      return {C, 4 * C};
    default:  // norms and the C-sized biases
      return {C};
  }
}

}  // namespace

bool Config::operator==(const Config& o) const {
  return max_seq_len == o.max_seq_len && vocab_size == o.vocab_size &&
         padded_vocab_size == o.padded_vocab_size &&
         num_layers == o.num_layers && num_heads == o.num_heads &&
         channels == o.channels;
}

absl::Status ValidateConfig(const Config& c) {
  const struct {
    const char* name;
    int value;
  } fields[] = {{"max_seq_len", c.max_seq_len},
                {"vocab_size", c.vocab_size},
                {"padded_vocab_size", c.padded_vocab_size},
                {"num_layers", c.num_layers},
                {"num_heads", c.num_heads},
                {"channels", c.channels}};
  for (const auto& f : fields) {
    if (f.value <= 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "GPT-2 config: %s must be positive, got %d", f.name, f.value));
    }
  }
  if (c.padded_vocab_size < c.vocab_size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GPT-2 config: padded_vocab_size %d is smaller than vocab_size %d",
        c.padded_vocab_size, c.vocab_size));
  }
  if (c.channels % c.num_heads != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GPT-2 config: num_heads %d does not divide channels %d", c.num_heads,
        c.channels));
  }
  // Parameter count in 128-bit arithmetic: each tensor's offset must fit a
  // uint64 and every dimension product an int64 (activation sizes use
  // B*T*4C and B*NH*T*T, checked by the model against its batch shape).
  const unsigned __int128 C = c.channels;
  const unsigned __int128 total =
      static_cast<unsigned __int128>(c.padded_vocab_size) * C +
      static_cast<unsigned __int128>(c.max_seq_len) * C +
      static_cast<unsigned __int128>(c.num_layers) * (12 * C * C + 13 * C) +
      2 * C;
  if (total >
      static_cast<unsigned __int128>(std::numeric_limits<int64_t>::max() / 4)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GPT-2 config: too many parameters (", DescribeConfig(c), ")"));
  }
  return absl::OkStatus();
}

std::string DescribeConfig(const Config& c) {
  return absl::StrFormat("maxT=%d V=%d Vp=%d L=%d NH=%d C=%d", c.max_seq_len,
                         c.vocab_size, c.padded_vocab_size, c.num_layers,
                         c.num_heads, c.channels);
}

bool IsPerLayer(ParamKind kind) {
  return kind != ParamKind::kWte && kind != ParamKind::kWpe &&
         kind != ParamKind::kLnfw && kind != ParamKind::kLnfb;
}

const char* ParamKindName(ParamKind kind) {
  static constexpr const char* kNames[kNumParamKinds] = {
      "wte",      "wpe",      "ln1w", "ln1b", "qkvw", "qkvb",
      "attprojw", "attprojb", "ln2w", "ln2b", "fcw",  "fcb",
      "fcprojw",  "fcprojb",  "lnfw", "lnfb"};
  return kNames[static_cast<int>(kind)];
}

bool IsMatrix(ParamKind kind) {
  switch (kind) {
    case ParamKind::kWte:
    case ParamKind::kWpe:
    case ParamKind::kQkvw:
    case ParamKind::kAttprojw:
    case ParamKind::kFcw:
    case ParamKind::kFcprojw:
      return true;
    default:
      return false;
  }
}

absl::StatusOr<ParamLayout> ParamLayout::Create(const Config& config) {
  if (absl::Status s = ValidateConfig(config); !s.ok()) return s;
  ParamLayout layout;
  layout.config_ = config;
  uint64_t offset = 0;
  auto add = [&](ParamKind kind, int layer) {
    ParamTensor t;
    t.kind = kind;
    t.layer = layer;
    t.name = layer < 0 ? ParamKindName(kind)
                       : absl::StrCat("h.", layer, ".", ParamKindName(kind));
    t.shape = ShapeOf(kind, config);
    t.numel = 1;
    for (int64_t d : t.shape) t.numel *= static_cast<uint64_t>(d);
    t.offset = offset;
    offset += t.numel;
    layout.tensors_.push_back(std::move(t));
  };
  add(ParamKind::kWte, -1);
  add(ParamKind::kWpe, -1);
  for (int l = 0; l < config.num_layers; ++l) {
    for (ParamKind kind : kBlockKinds) add(kind, l);
  }
  add(ParamKind::kLnfw, -1);
  add(ParamKind::kLnfb, -1);
  layout.num_params_ = offset;
  return layout;
}

const ParamTensor& ParamLayout::Get(ParamKind kind, int layer) const {
  switch (kind) {
    case ParamKind::kWte:
      return tensors_[0];
    case ParamKind::kWpe:
      return tensors_[1];
    case ParamKind::kLnfw:
      return tensors_[tensors_.size() - 2];
    case ParamKind::kLnfb:
      return tensors_[tensors_.size() - 1];
    default:
      return tensors_[2 + layer * kKindsPerBlock +
                      (static_cast<int>(kind) -
                       static_cast<int>(ParamKind::kLn1w))];
  }
}

std::vector<const ParamTensor*> ParamLayout::FileOrder() const {
  std::vector<const ParamTensor*> order;
  order.reserve(tensors_.size());
  order.push_back(&Get(ParamKind::kWte));
  order.push_back(&Get(ParamKind::kWpe));
  for (ParamKind kind : kBlockKinds) {
    for (int l = 0; l < config_.num_layers; ++l) {
      order.push_back(&Get(kind, l));
    }
  }
  order.push_back(&Get(ParamKind::kLnfw));
  order.push_back(&Get(ParamKind::kLnfb));
  return order;
}

Range ParamLayout::LayerRange(int layer) const {
  const ParamTensor& first = Get(ParamKind::kLn1w, layer);
  const ParamTensor& last = Get(ParamKind::kFcprojb, layer);
  return Range{first.offset, last.offset + last.numel};
}

Range ParamLayout::EmbeddingRange() const {
  const ParamTensor& wpe = Get(ParamKind::kWpe);
  return Range{0, wpe.offset + wpe.numel};
}

Range ParamLayout::FinalNormRange() const {
  return Range{Get(ParamKind::kLnfw).offset, num_params_};
}

std::vector<TensorDesc> ParamLayout::TensorDescs() const {
  std::vector<TensorDesc> descs;
  descs.reserve(tensors_.size());
  for (const ParamTensor& t : tensors_) {
    descs.push_back(TensorDesc{t.name, t.shape, IsMatrix(t.kind) ? 0u : 1u});
  }
  return descs;
}

}  // namespace zeroshard::gpt2
