#include "server/store/push_session.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/model_spec.h"
#include "common/status_macros.h"

namespace zeroshard {

PushSession::~PushSession() {
  // The writer waits for its I/O: a new push may claim the range once it
  // is released.
  writer_.reset();
  if (!duplicate_ && !finished_) owner_->PushReleased(claim_);
}

absl::Status PushSession::AddChunk(const void* data, size_t bytes) {
  if (duplicate_ || finished_) return absl::OkStatus();  // nothing to apply
  const size_t esize = DTypeSize(dtype_);
  if (bytes > kMaxChunkBytes) {
    return owner_->PushRejected(absl::InvalidArgumentError(
        absl::StrCat("chunk of ", bytes, " bytes exceeds the ", kMaxChunkBytes,
                     "-byte limit")));
  }
  if (bytes % esize != 0) {
    return owner_->PushRejected(absl::InvalidArgumentError(
        absl::StrCat("chunk of ", bytes, " bytes is not a whole number of ",
                     v1::DType_Name(dtype_), " elements")));
  }
  const uint64_t n = bytes / esize;
  if (n > length_ - received_) {
    return owner_->PushRejected(absl::InvalidArgumentError(
        absl::StrCat("contribution carries more than the announced ", length_,
                     " elements")));
  }
  if (n == 0) return absl::OkStatus();
  if (writer_ == nullptr) {
    ZS_ASSIGN_OR_RETURN(writer_,
                        state_->NewGradWriter(claim_.slot, offset_, length_));
  }
  const float* fp32 = static_cast<const float*>(data);
  if (dtype_ != v1::DTYPE_FP32) {
    converted_.resize(n);
    if (dtype_ == v1::DTYPE_BF16) {
      ConvertBf16ToFp32(static_cast<const uint16_t*>(data), converted_.data(),
                        n);
    } else {
      ConvertFp16ToFp32(static_cast<const uint16_t*>(data), converted_.data(),
                        n);
    }
    fp32 = converted_.data();
  }
  ZS_RETURN_IF_ERROR(writer_->Append(fp32, n));
  received_ += n;
  owner_->PushedBytes(bytes);
  return absl::OkStatus();
}

absl::Status PushSession::Finish() {
  if (duplicate_ || finished_) return absl::OkStatus();
  if (received_ != length_) {
    return owner_->PushRejected(absl::InvalidArgumentError(
        absl::StrCat("contribution ended after ", received_, " of ", length_,
                     " announced elements")));
  }
  ZS_RETURN_IF_ERROR(writer_->Finish());
  owner_->PushFinished(claim_);
  finished_ = true;
  return absl::OkStatus();
}

}  // namespace zeroshard
