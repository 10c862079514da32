#include "server/storage/tier.h"

#include <algorithm>
#include <utility>
#include <vector>

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

class SequentialGradWriter : public GradWriter {
 public:
  SequentialGradWriter(
      uint64_t offset, uint64_t n,
      std::function<absl::Status(uint64_t, const float*, uint64_t)> write)
      : write_(std::move(write)), next_(offset), end_(offset + n) {}
  absl::Status Append(const float* data, uint64_t count) override {
    if (count > end_ - next_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gradient writer: ", count, " elements past the range's end"));
    }
    absl::Status s = write_(next_, data, count);
    if (s.ok()) next_ += count;
    return s;
  }
  absl::Status Finish() override {
    if (next_ == end_) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "gradient writer finished ", end_ - next_, " elements short"));
  }

 private:
  const std::function<absl::Status(uint64_t, const float*, uint64_t)> write_;
  uint64_t next_;
  const uint64_t end_;
};

}  // namespace

std::unique_ptr<GradWriter> NewSequentialGradWriter(
    uint64_t offset, uint64_t n,
    std::function<absl::Status(uint64_t at, const float* data, uint64_t count)>
        write) {
  return std::make_unique<SequentialGradWriter>(offset, n, std::move(write));
}

absl::StatusOr<std::unique_ptr<GradWriter>> StorageTier::NewGradWriter(
    uint64_t offset, uint64_t n) {
  const uint64_t size = layout().size;
  if (offset > size || n > size - offset) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradient range [", offset, ", ", offset + n,
                     ") is outside the tier's [0, ", size, ")"));
  }
  // Each Append is a WriteGrad.
  return NewSequentialGradWriter(
      offset, n, [this](uint64_t at, const float* data, uint64_t count) {
        return WriteGrad(at, data, count);
      });
}

absl::Status StorageTier::VisitGrad(
    uint64_t offset, uint64_t n, bool write,
    const std::function<absl::Status(float* g)>& fn) {
  std::vector<float> g(n);
  absl::Status s;
  if (write) {
    absl::MutexLock l(&visit_mu_);
    s = ReadGrad(offset, n, g.data());
  } else {
    s = ReadGrad(offset, n, g.data());
  }
  if (s.ok()) s = fn(g.data());
  if (s.ok() && write) {
    absl::MutexLock l(&visit_mu_);
    s = WriteGrad(offset, g.data(), n);
  }
  return s;
}

}  // namespace storage
}  // namespace zeroshard
