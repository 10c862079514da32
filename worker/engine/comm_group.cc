#include "worker/engine/comm_group.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/engine/op_wait.h"

namespace zeroshard::engine {

using collective::DType;

uint64_t CommGroup::Slot() const {
  const uint32_t alignment = comm_->part_alignment();
  return alignment * ((4 + alignment - 1) / alignment);
}

absl::Status CommGroup::AllGather(const void* mine, size_t bytes, void* all) {
  if (bytes > 4 * sizeof(float)) {
    return absl::InvalidArgumentError(
        absl::StrCat("CommGroup::AllGather: ", bytes,
                     " bytes per rank (at "
                     "most 16)"));
  }
  const int W = comm_->size();
  std::vector<float> buf(Slot() * W, 0.0f);
  const uint64_t count = buf.size();
  std::memcpy(buf.data() + comm_->PartRange(count, comm_->rank()).begin, mine,
              bytes);
  ZS_RETURN_IF_ERROR(
      WaitOp(comm_->AllGather(buf.data(), count, DType::kFloat32),
             &stats_->all_gather, &stats_->comm_wait_seconds));
  for (int r = 0; r < W; ++r) {
    std::memcpy(static_cast<char*>(all) + r * bytes,
                buf.data() + comm_->PartRange(count, r).begin, bytes);
  }
  return absl::OkStatus();
}

absl::Status CommGroup::Broadcast(void* word, size_t bytes) {
  std::vector<float> buf((bytes + sizeof(float) - 1) / sizeof(float), 0.0f);
  std::memcpy(buf.data(), word, bytes);
  ZS_RETURN_IF_ERROR(
      WaitOp(comm_->Broadcast(buf.data(), buf.size(), DType::kFloat32, 0),
             &stats_->broadcast, &stats_->comm_wait_seconds));
  std::memcpy(word, buf.data(), bytes);
  return absl::OkStatus();
}

absl::Status CommGroup::Barrier() {
  return WaitOp(comm_->Barrier(), &stats_->broadcast,
                &stats_->comm_wait_seconds);
}

}  // namespace zeroshard::engine
