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

namespace {

// StorageTier::NewGradWriter's default: each Append is a WriteGrad.
class ForwardingGradWriter : public GradWriter {
 public:
  ForwardingGradWriter(StorageTier* tier, uint64_t offset, uint64_t n)
      : tier_(tier), next_(offset), end_(offset + n) {}
  absl::Status Append(const float* data, uint64_t count) override {
    if (count > end_ - next_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gradient writer: ", count, " elements past the range's end"));
    }
    absl::Status s = tier_->WriteGrad(next_, data, count);
    if (s.ok()) next_ += count;
    return s;
  }
  absl::Status Finish() override {
    if (next_ == end_) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "gradient writer finished ", end_ - next_, " elements short"));
  }

 private:
  StorageTier* const tier_;
  uint64_t next_;
  const uint64_t end_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GradWriter>> StorageTier::NewGradWriter(
    uint64_t offset, uint64_t n) {
  const uint64_t size = layout().size;
  if (offset > size || n > size - offset) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradient range [", offset, ", ", offset + n,
                     ") is outside the tier's [0, ", size, ")"));
  }
  return std::make_unique<ForwardingGradWriter>(this, offset, n);
}

}  // namespace storage
}  // namespace zeroshard
