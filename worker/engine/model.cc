#include "worker/engine/model.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace zeroshard::engine {

std::vector<TensorDesc> ModelLayout::TensorDescs() const {
  std::vector<TensorDesc> out;
  for (const TensorInfo& t : tensors) out.push_back(t.desc);
  return out;
}

absl::StatusOr<ModelLayout> MakeModelLayout(
    const std::vector<TensorDesc>& tensors, const std::vector<int>& unit_sizes,
    std::vector<int> need_schedule) {
  ModelLayout layout;
  uint64_t at = 0;
  for (const TensorDesc& d : tensors) {
    uint64_t numel = 1;
    for (int64_t dim : d.shape) {
      if (dim < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", d.name, "' has a dimension of ", dim));
      }
      numel *= static_cast<uint64_t>(dim);
    }
    if (d.shape.empty()) numel = 0;
    layout.tensors.push_back(TensorInfo{d, numel, Range{at, at + numel}});
    at += numel;
  }
  size_t next = 0;
  for (int n : unit_sizes) {
    if (n < 1 || next + static_cast<size_t>(n) > layout.tensors.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unit ", layout.units.size(), " of ", n, " tensors does not fit the ",
          layout.tensors.size(), " tensors"));
    }
    layout.units.push_back(Range{layout.tensors[next].range.begin,
                                 layout.tensors[next + n - 1].range.end});
    next += static_cast<size_t>(n);
  }
  layout.need_schedule = std::move(need_schedule);
  if (absl::Status s = ValidateModelLayout(layout); !s.ok()) return s;
  return layout;
}

absl::Status ValidateModelLayout(const ModelLayout& layout) {
  if (layout.tensors.empty()) {
    return absl::InvalidArgumentError("a model needs at least one tensor");
  }
  uint64_t at = 0;
  for (const TensorInfo& t : layout.tensors) {
    if (t.desc.shape.empty() || t.numel == 0 || t.range.begin != at ||
        t.range.size() != t.numel) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", t.desc.name, "' is empty or not laid out at ", at));
    }
    if (t.desc.param_group > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.desc.name, "': parameter group ",
                       t.desc.param_group, " (0: weight decay, 1: none)"));
    }
    at = t.range.end;
  }
  uint64_t covered = 0;
  for (size_t u = 0; u < layout.units.size(); ++u) {
    if (layout.units[u].begin != covered || layout.units[u].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unit ", u, " does not start where unit ", u,
                       " - 1 ends (", covered, ") or is empty"));
    }
    covered = layout.units[u].end;
  }
  if (covered != at) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the units cover ", covered, " of the ", at, " parameters"));
  }
  for (int u : layout.need_schedule) {
    if (u < 0 || static_cast<size_t>(u) >= layout.units.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the need schedule names unit ", u, " of ", layout.units.size()));
    }
  }
  return absl::OkStatus();
}

}  // namespace zeroshard::engine
