#include "server/storage/ram_tier.h"

#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/storage/adamw_pass.h"

namespace zeroshard {
namespace storage {

absl::StatusOr<std::unique_ptr<RamTier>> RamTier::Create(
    const TierLayout& layout, ThreadPool* pool) {
  ZS_RETURN_IF_ERROR(ValidateLayout(layout));
  const uint64_t n = layout.size;
  if (n > (uint64_t{1} << 59)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a tier of ", n, " elements cannot be held in RAM"));
  }
  std::unique_ptr<RamTier> t(new RamTier(layout, pool));
  // p = 0 and serve = 16-bit 0 = 0x0000 for both formats: zero-filled.
  // A refused allocation frees the arrays already made with `t`.
  struct Array {
    AlignedBuffer* buffer;
    uint64_t bytes;
    const char* what;
  };
  for (const Array& a : {Array{&t->p_, n * 4, "the fp32 master weights"},
                         Array{&t->m_, n * 4, "AdamW's first moments"},
                         Array{&t->v_, n * 4, "AdamW's second moments"},
                         Array{&t->g_, n * 4, "the gradient accumulator"},
                         Array{&t->serve_, n * 2, "the 16-bit serving copy"}}) {
    absl::StatusOr<AlignedBuffer> b =
        AlignedBuffer::Allocate(a.bytes, &t->account_, a.what);
    if (!b.ok()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the model's state needs ", n * 18, " bytes of RAM on this shard (",
          n, " elements x 18); ", b.status().message()));
    }
    *a.buffer = *std::move(b);
  }
  return t;
}

RamTier::RamTier(const TierLayout& layout, ThreadPool* pool)
    : layout_(layout), pool_(pool) {}

absl::Status RamTier::CheckRange(uint64_t offset, uint64_t n) const {
  if (offset > layout_.size || n > layout_.size - offset) {
    return absl::InvalidArgumentError(
        absl::StrCat("range [", offset, ", ", offset + n,
                     ") is outside the tier's [0, ", layout_.size, ")"));
  }
  return absl::OkStatus();
}

absl::Status RamTier::WriteMaster(uint64_t offset, const float* data,
                                  uint64_t n) {
  ZS_RETURN_IF_ERROR(CheckRange(offset, n));
  absl::MutexLock l(&mu_);
  std::memcpy(p_.as<float>() + offset, data, n * 4);
  ConvertServing(layout_.serving, data, serve_.as<uint16_t>() + offset, n);
  return absl::OkStatus();
}

absl::Status RamTier::ReadMaster(uint64_t offset, uint64_t n, float* out) {
  ZS_RETURN_IF_ERROR(CheckRange(offset, n));
  absl::ReaderMutexLock l(&mu_);
  std::memcpy(out, p_.as<float>() + offset, n * 4);
  return absl::OkStatus();
}

absl::Status RamTier::WriteMoments(uint64_t offset, const float* m,
                                   const float* v, uint64_t n) {
  ZS_RETURN_IF_ERROR(CheckRange(offset, n));
  absl::MutexLock l(&mu_);
  std::memcpy(m_.as<float>() + offset, m, n * 4);
  std::memcpy(v_.as<float>() + offset, v, n * 4);
  return absl::OkStatus();
}

absl::Status RamTier::ReadMoments(uint64_t offset, uint64_t n, float* m,
                                  float* v) {
  ZS_RETURN_IF_ERROR(CheckRange(offset, n));
  absl::ReaderMutexLock l(&mu_);
  std::memcpy(m, m_.as<float>() + offset, n * 4);
  std::memcpy(v, v_.as<float>() + offset, n * 4);
  return absl::OkStatus();
}

absl::Status RamTier::ReadServing(uint64_t offset, uint64_t n, uint16_t* out,
                                  uint64_t* step) {
  ZS_RETURN_IF_ERROR(CheckRange(offset, n));
  absl::ReaderMutexLock l(&mu_);
  std::memcpy(out, serve_.as<uint16_t>() + offset, n * 2);
  if (step != nullptr) *step = steps_;
  return absl::OkStatus();
}

absl::Status RamTier::WriteGrad(uint64_t offset, const float* data,
                                uint64_t n) {
  ZS_RETURN_IF_ERROR(CheckRange(offset, n));
  std::memcpy(g_.as<float>() + offset, data, n * 4);
  return absl::OkStatus();
}

absl::Status RamTier::AddGrad(uint64_t offset, const float* data, uint64_t n) {
  ZS_RETURN_IF_ERROR(CheckRange(offset, n));
  float* g = g_.as<float>() + offset;
  for (uint64_t i = 0; i < n; ++i) g[i] += data[i];
  return absl::OkStatus();
}

absl::Status RamTier::ReadGrad(uint64_t offset, uint64_t n, float* out) {
  ZS_RETURN_IF_ERROR(CheckRange(offset, n));
  std::memcpy(out, g_.as<float>() + offset, n * 4);
  return absl::OkStatus();
}

absl::Status RamTier::VisitGrad(
    uint64_t offset, uint64_t n, bool write,
    const std::function<absl::Status(float* g)>& fn) {
  ZS_RETURN_IF_ERROR(CheckRange(offset, n));
  return fn(g_.as<float>() + offset);
}

absl::Status RamTier::ZeroGrad() {
  std::memset(g_.data(), 0, g_.size());
  return absl::OkStatus();
}

absl::Status RamTier::Step(const std::vector<AdamWHyper>& hypers) {
  if (hypers.size() != layout_.num_groups()) {
    return absl::InvalidArgumentError(
        absl::StrCat(hypers.size(), " hyperparameter sets for ",
                     layout_.num_groups(), " parameter groups"));
  }
  const auto start = std::chrono::steady_clock::now();
  absl::MutexLock l(&mu_);
  AdamWWindow(layout_, hypers, 0, layout_.size, p_.as<float>(), g_.as<float>(),
              m_.as<float>(), v_.as<float>(), serve_.as<uint16_t>(), pool_);
  ++steps_;
  last_step_seconds_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  return absl::OkStatus();
}

absl::Status RamTier::Snapshot(const std::string& dir) {
  return absl::UnimplementedError(
      "RamTier has no files to snapshot; checkpoint through the store");
}

TierStats RamTier::Stats() const {
  absl::ReaderMutexLock l(&mu_);
  TierStats s;
  s.steps = steps_;
  s.last_step_seconds = last_step_seconds_;
  s.bytes_allocated = account_.current();
  s.peak_bytes_allocated = account_.peak();
  return s;
}

}  // namespace storage
}  // namespace zeroshard
