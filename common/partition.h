// The partition plan: how the flat parameter space is split over servers
// and worker slices. Pure functions and an immutable value type; safe to
// share between threads.
//
// The flat space is all tensors concatenated in registration order, with no
// padding between them (so a model file's parameters map 1:1 onto it).
// Ψ = total elements. K servers own contiguous ranges whose boundaries are
// multiples of `alignment` elements (except the end, Ψ): the ceil(Ψ/align)
// alignment units are dealt out as evenly as possible, earlier servers
// taking the remainder. The same rule splits the space into W worker slices
// for reduce-scatter/all-gather. A server or slice may be empty when Ψ is
// tiny.
//
// Example:
//   ZS_ASSIGN_OR_RETURN(PartitionPlan plan,
//                       PartitionPlan::Create(tensors, /*num_servers=*/2,
//                                             /*alignment=*/64));
//   for (const ShardPiece& piece : plan.Split(plan.TensorRange("wte"))) ...
#ifndef ZEROSHARD_COMMON_PARTITION_H_
#define ZEROSHARD_COMMON_PARTITION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace zeroshard {

// Half-open range [begin, end) of flat element indices.
struct Range {
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t size() const { return end - begin; }
  bool empty() const { return end <= begin; }
  bool Contains(const Range& r) const {
    return begin <= r.begin && r.end <= end;
  }
  bool operator==(const Range& o) const {
    return begin == o.begin && end == o.end;
  }
};

// Intersection of two ranges (empty, with begin == end, if disjoint).
Range Intersect(const Range& a, const Range& b);

// Range of part `index` of `parts` over [0, total) with boundaries at
// multiples of `alignment` (see the file comment). Requires parts >= 1,
// index < parts, alignment >= 1.
Range AlignedPartRange(uint64_t total, uint32_t parts, uint32_t index,
                       uint32_t alignment);

// Index of the part containing `element` (< total) under the same rule.
uint32_t AlignedPartOf(uint64_t total, uint32_t parts, uint32_t alignment,
                       uint64_t element);

struct TensorDesc {
  std::string name;
  std::vector<int64_t> shape;
  uint32_t param_group = 0;
};

struct TensorInfo {
  TensorDesc desc;
  uint64_t numel = 0;
  Range range;  // where it lives in the flat space
};

// A piece of a range that one server owns.
struct ShardPiece {
  uint32_t server = 0;
  Range range;
};

class PartitionPlan {
 public:
  // Validates names (non-empty, unique), shapes (rank >= 1, dims >= 1,
  // no overflow), num_servers >= 1 and alignment >= 1; errors are
  // INVALID_ARGUMENT naming the tensor or field.
  static absl::StatusOr<PartitionPlan> Create(std::vector<TensorDesc> tensors,
                                              uint32_t num_servers,
                                              uint32_t alignment);

  uint64_t total() const { return total_; }
  uint32_t num_servers() const { return num_servers_; }
  uint32_t alignment() const { return alignment_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }

  Range ServerRange(uint32_t server) const {
    return AlignedPartRange(total_, num_servers_, server, alignment_);
  }
  uint32_t OwnerOf(uint64_t element) const {
    return AlignedPartOf(total_, num_servers_, alignment_, element);
  }
  // Worker w's slice when the space is split over `workers` (same rule).
  Range WorkerSlice(uint32_t workers, uint32_t w) const {
    return AlignedPartRange(total_, workers, w, alignment_);
  }

  // Index of the tensor named `name`, or NOT_FOUND.
  absl::StatusOr<size_t> FindTensor(absl::string_view name) const;

  // The pieces of `r` (clamped to [0, total)) by owning server, in order.
  std::vector<ShardPiece> Split(const Range& r) const;

  // Indices of tensors that overlap `r`.
  std::vector<size_t> TensorsIn(const Range& r) const;

  // FNV-1a over the canonical plan (names, shapes, groups, K, alignment).
  // Equal on every process that built the plan from the same inputs.
  uint64_t Hash() const;

 private:
  std::vector<TensorInfo> tensors_;
  uint64_t total_ = 0;
  uint32_t num_servers_ = 1;
  uint32_t alignment_ = 1;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_PARTITION_H_
