#include "worker/gpt2/activations.h"

#include <climits>
#include <cstdint>
#include <cstring>
#include <limits>

#include "absl/strings/str_format.h"

namespace zeroshard::gpt2 {
namespace {

using u128 = unsigned __int128;

// Hands out 64-byte aligned pieces of one buffer. A first pass with a null
// base only adds up the sizes (in 128-bit arithmetic).
class Carver {
 public:
  explicit Carver(float* base) : base_(base) {}
  float* Take(u128 count) {
    float* p = base_ == nullptr ? nullptr : base_ + static_cast<int64_t>(used_);
    used_ += (count + 15) / 16 * 16;
    return p;
  }
  u128 used() const { return used_; }

 private:
  float* base_;
  u128 used_ = 0;
};

void Carve(const Config& c, int B, int T, bool checkpoint, Carver* k,
           Activations* a) {
  const u128 BT = static_cast<u128>(B) * T, C = c.channels;
  const u128 L = c.num_layers;
  a->x = k->Take((L + 1) * BT * C);
  a->blocks.resize(checkpoint ? 1 : c.num_layers);
  for (BlockActs& s : a->blocks) {
    s.ln1 = k->Take(BT * C);
    s.ln1_mean = k->Take(BT);
    s.ln1_rstd = k->Take(BT);
    s.qkv = k->Take(BT * 3 * C);
    s.atty = k->Take(BT * C);
    s.att = k->Take(static_cast<u128>(B) * c.num_heads * T * T);
    s.res2 = k->Take(BT * C);
    s.ln2 = k->Take(BT * C);
    s.ln2_mean = k->Take(BT);
    s.ln2_rstd = k->Take(BT);
    s.fch = k->Take(BT * 4 * C);
    s.fch_gelu = k->Take(BT * 4 * C);
  }
  a->lnf = k->Take(BT * C);
  a->lnf_mean = k->Take(BT);
  a->lnf_rstd = k->Take(BT);
  a->logits = k->Take(BT * c.padded_vocab_size);
  a->losses = k->Take(BT);
  a->dres = k->Take(BT * C);
  a->dc = k->Take(BT * C);
  a->d4c = k->Take(BT * 4 * C);
  a->inputs = reinterpret_cast<int*>(k->Take(BT));
  a->targets = reinterpret_cast<int*>(k->Take(BT));
}

}  // namespace

ActivationArena::~ActivationArena() {
  if (device_ != nullptr) {
    device_->Free(memory_);
  } else {
    std::free(memory_);
  }
}

absl::StatusOr<std::unique_ptr<ActivationArena>> ActivationArena::Create(
    const Config& config, int B, int T, bool checkpoint, Device* device) {
  if (B < 1 || T < 1 || T > config.max_seq_len) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GPT-2 batch shape B=%d T=%d: need B >= 1 and 1 <= T <= max_seq_len "
        "%d",
        B, T, config.max_seq_len));
  }
  if (static_cast<int64_t>(B) * T > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GPT-2 batch shape B=%d T=%d: B*T exceeds %d", B, T, INT_MAX));
  }
  Carver sizer(nullptr);
  Activations plan;
  Carve(config, B, T, checkpoint, &sizer, &plan);
  // Every element index must fit an int64 and the byte count a size_t.
  const u128 limit = std::numeric_limits<int64_t>::max() / sizeof(float);
  if (sizer.used() > limit) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GPT-2 batch shape B=%d T=%d: activations overflow (%s)", B, T,
        DescribeConfig(config)));
  }
  auto arena = std::unique_ptr<ActivationArena>(new ActivationArena());
  arena->floats_ = static_cast<int64_t>(sizer.used());
  const size_t bytes = static_cast<size_t>(arena->floats_) * sizeof(float);
  if (device != nullptr) {
    auto memory = device->Alloc(bytes);  // zeroed
    if (!memory.ok()) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "GPT-2 activations: cannot allocate %d bytes on %s for B=%d T=%d "
          "(%s): %s",
          bytes, device->Name(), B, T, DescribeConfig(config),
          memory.status().message()));
    }
    arena->device_ = device;
    arena->memory_ = static_cast<float*>(*memory);
  } else {
    arena->memory_ = static_cast<float*>(std::aligned_alloc(64, bytes));
    if (arena->memory_ == nullptr) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "GPT-2 activations: cannot allocate %d bytes for B=%d T=%d (%s)",
          bytes, B, T, DescribeConfig(config)));
    }
    std::memset(arena->memory_, 0, bytes);  // touch every page now
  }
  Carver carver(arena->memory_);
  Carve(config, B, T, checkpoint, &carver, &arena->acts_);
  return arena;
}

}  // namespace zeroshard::gpt2
