#include "common/partition.h"

#include <algorithm>
#include <limits>
#include <unordered_set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace zeroshard {

Range Intersect(const Range& a, const Range& b) {
  const uint64_t begin = std::max(a.begin, b.begin);
  const uint64_t end = std::min(a.end, b.end);
  return end > begin ? Range{begin, end} : Range{begin, begin};
}

namespace {

// Start of part `index` in alignment units: q units each, the first r parts
// one more.
uint64_t PartStartUnits(uint64_t units, uint32_t parts, uint32_t index) {
  const uint64_t q = units / parts;
  const uint64_t r = units % parts;
  return q * index + std::min<uint64_t>(index, r);
}

uint64_t Fnv1a(uint64_t h, const void* data, size_t n) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

uint64_t Fnv1aU64(uint64_t h, uint64_t v) {
  unsigned char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
  return Fnv1a(h, b, 8);
}

}  // namespace

Range AlignedPartRange(uint64_t total, uint32_t parts, uint32_t index,
                       uint32_t alignment) {
  const uint64_t units = (total + alignment - 1) / alignment;
  const uint64_t begin =
      std::min(total, PartStartUnits(units, parts, index) * alignment);
  const uint64_t end =
      std::min(total, PartStartUnits(units, parts, index + 1) * alignment);
  return Range{begin, end};
}

uint32_t AlignedPartOf(uint64_t total, uint32_t parts, uint32_t alignment,
                       uint64_t element) {
  const uint64_t units = (total + alignment - 1) / alignment;
  const uint64_t unit = element / alignment;
  const uint64_t q = units / parts;
  const uint64_t r = units % parts;
  // The first r parts hold q+1 units each, the rest q.
  if (unit < r * (q + 1)) return static_cast<uint32_t>(unit / (q + 1));
  return static_cast<uint32_t>(r + (unit - r * (q + 1)) / q);
}

absl::StatusOr<PartitionPlan> PartitionPlan::Create(
    std::vector<TensorDesc> tensors, uint32_t num_servers, uint32_t alignment) {
  if (num_servers == 0) {
    return absl::InvalidArgumentError("num_servers must be >= 1");
  }
  if (alignment == 0) {
    return absl::InvalidArgumentError("alignment must be >= 1");
  }
  if (tensors.empty()) {
    return absl::InvalidArgumentError("the model has no tensors");
  }
  PartitionPlan plan;
  plan.num_servers_ = num_servers;
  plan.alignment_ = alignment;
  std::unordered_set<std::string> names;
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    TensorDesc& t = tensors[i];
    if (t.name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", i, " has an empty name"));
    }
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor name '", t.name, "' appears twice"));
    }
    if (t.shape.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.name, "' has no dimensions"));
    }
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor '", t.name, "' has dimension ", d, " (must be >= 1)"));
      }
      if (numel > (uint64_t{1} << 48) / static_cast<uint64_t>(d)) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", t.name, "' is too large"));
      }
      numel *= static_cast<uint64_t>(d);
    }
    if (offset + numel > (uint64_t{1} << 48)) {
      return absl::InvalidArgumentError("the model is too large (> 2^48)");
    }
    TensorInfo info;
    info.numel = numel;
    info.range = Range{offset, offset + numel};
    info.desc = std::move(t);
    plan.tensors_.push_back(std::move(info));
    offset += numel;
  }
  plan.total_ = offset;
  return plan;
}

absl::StatusOr<size_t> PartitionPlan::FindTensor(absl::string_view name) const {
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (tensors_[i].desc.name == name) return i;
  }
  return absl::NotFoundError(absl::StrCat("no tensor named '", name, "'"));
}

std::vector<ShardPiece> PartitionPlan::Split(const Range& r) const {
  std::vector<ShardPiece> pieces;
  const Range clamped = Intersect(r, Range{0, total_});
  if (clamped.empty()) return pieces;
  for (uint32_t s = OwnerOf(clamped.begin); s < num_servers_; ++s) {
    const Range piece = Intersect(clamped, ServerRange(s));
    if (piece.begin >= clamped.end) break;
    if (!piece.empty()) pieces.push_back(ShardPiece{s, piece});
  }
  return pieces;
}

std::vector<size_t> PartitionPlan::TensorsIn(const Range& r) const {
  std::vector<size_t> out;
  // Tensors are sorted by offset: binary search the first that ends after
  // r.begin.
  auto it = std::upper_bound(
      tensors_.begin(), tensors_.end(), r.begin,
      [](uint64_t v, const TensorInfo& t) { return v < t.range.end; });
  for (; it != tensors_.end() && it->range.begin < r.end; ++it) {
    out.push_back(static_cast<size_t>(it - tensors_.begin()));
  }
  return out;
}

uint64_t PartitionPlan::Hash() const {
  uint64_t h = 14695981039346656037ull;
  h = Fnv1aU64(h, num_servers_);
  h = Fnv1aU64(h, alignment_);
  h = Fnv1aU64(h, tensors_.size());
  for (const TensorInfo& t : tensors_) {
    h = Fnv1aU64(h, t.desc.name.size());
    h = Fnv1a(h, t.desc.name.data(), t.desc.name.size());
    h = Fnv1aU64(h, t.desc.shape.size());
    for (int64_t d : t.desc.shape) h = Fnv1aU64(h, static_cast<uint64_t>(d));
    h = Fnv1aU64(h, t.desc.param_group);
  }
  return h;
}

}  // namespace zeroshard
