#include "server/storage/tier.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace zeroshard {
namespace storage {

uint32_t TierLayout::num_groups() const {
  uint32_t n = 0;
  for (const GroupSpan& s : groups) n = std::max(n, s.group + 1);
  return n;
}

absl::Status ValidateLayout(const TierLayout& layout) {
  if (layout.serving != ServingType::kBf16 &&
      layout.serving != ServingType::kFp16) {
    return absl::InvalidArgumentError("the serving copy must be bf16 or fp16");
  }
  uint64_t prev_end = 0;
  for (size_t i = 0; i < layout.groups.size(); ++i) {
    const GroupSpan& s = layout.groups[i];
    if (s.begin >= s.end || s.end > layout.size || s.begin < prev_end) {
      return absl::InvalidArgumentError(absl::StrCat(
          "group span ", i, " [", s.begin, ", ", s.end,
          ") is empty, overlaps the previous one or ends past the size ",
          layout.size));
    }
    prev_end = s.end;
  }
  return absl::OkStatus();
}

}  // namespace storage
}  // namespace zeroshard
