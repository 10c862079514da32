#include "client/capi/client_handle.h"

#include "absl/strings/str_cat.h"
#include "client/zeroshard.h"

namespace zeroshard::capi {

absl::StatusOr<const PartitionPlan*> ClientHandle::Plan() const {
  if (!registered()) {
    return absl::FailedPreconditionError(
        "no model on this client: call zs_register (or zs_attach) first");
  }
  return &client_->plan();
}

void ClientHandle::RecordPush(uint64_t epoch, uint64_t step) {
  absl::MutexLock lock(&push_mu_);
  any_push_ = true;
  push_epoch_ = epoch;
  push_step_ = step;
}

bool ClientHandle::PushedFor(uint64_t epoch, uint64_t step) const {
  absl::MutexLock lock(&push_mu_);
  return any_push_ && push_epoch_ == epoch && push_step_ == step;
}

absl::StatusOr<size_t> DTypeBytes(int dtype) {
  switch (dtype) {
    case ZS_DTYPE_FP32:
      return 4;
    case ZS_DTYPE_BF16:
    case ZS_DTYPE_FP16:
      return 2;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "dtype ", dtype,
          " is not ZS_DTYPE_FP32 (1), ZS_DTYPE_BF16 (2) or ZS_DTYPE_FP16 (3)"));
  }
}

absl::Status CheckRange(const PartitionPlan& plan, uint64_t offset,
                        uint64_t count) {
  const uint64_t total = plan.total();
  if (offset > total || count > total - offset) {
    return absl::OutOfRangeError(
        absl::StrCat("range [", offset, ", ", offset, " + ", count,
                     ") is outside the model's ", total, " elements"));
  }
  return absl::OkStatus();
}

absl::Status CheckBuffer(const void* data, size_t bytes, uint64_t count,
                         size_t esize, const char* name) {
  if (count > SIZE_MAX / esize) {
    return absl::InvalidArgumentError(
        absl::StrCat("count ", count, " is more than any ", name, " holds"));
  }
  if (bytes != count * esize) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " holds ", bytes, " bytes, but ", count,
                     " elements of ", esize, " bytes need ", count * esize));
  }
  if (data == nullptr && count > 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, " is NULL"));
  }
  return absl::OkStatus();
}

}  // namespace zeroshard::capi
