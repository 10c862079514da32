#include "server/store/push_session.h"

#include <cstring>
#include <memory>
#include <new>

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
  const float* fp32 = static_cast<const float*>(data);
  float* out = nullptr;
  if (claim_.adopts_epoch) {
    // Held until the push arrives whole (at most the announced length, in
    // the owned range); a refused allocation rejects the push.
    std::unique_ptr<float[]> chunk(new (std::nothrow) float[n]);
    if (chunk == nullptr) {
      return owner_->PushRejected(absl::ResourceExhaustedError(absl::StrCat(
          "cannot hold ", n * sizeof(float),
          " bytes of a contribution with a newer epoch (out of memory)")));
    }
    out = chunk.get();
    staged_.push_back({std::move(chunk), n});
  } else if (dtype_ != v1::DTYPE_FP32) {
    converted_.resize(n);  // at most one chunk (kMaxChunkBytes)
    out = converted_.data();
  }
  if (dtype_ != v1::DTYPE_FP32) {
    if (dtype_ == v1::DTYPE_BF16) {
      ConvertBf16ToFp32(static_cast<const uint16_t*>(data), out, n);
    } else {
      ConvertFp16ToFp32(static_cast<const uint16_t*>(data), out, n);
    }
    fp32 = out;
  } else if (claim_.adopts_epoch) {
    std::memcpy(out, fp32, n * sizeof(float));
  }
  if (!claim_.adopts_epoch) ZS_RETURN_IF_ERROR(Write(fp32, n));
  received_ += n;
  owner_->PushedBytes(bytes);
  return absl::OkStatus();
}

absl::Status PushSession::Write(const float* data, uint64_t n) {
  if (writer_ == nullptr) {
    ZS_ASSIGN_OR_RETURN(writer_,
                        state_->NewGradWriter(claim_.slot, offset_, length_));
  }
  return writer_->Append(data, n);
}

absl::Status PushSession::Finish() {
  if (duplicate_ || finished_) return absl::OkStatus();
  if (received_ != length_) {
    return owner_->PushRejected(absl::InvalidArgumentError(
        absl::StrCat("contribution ended after ", received_, " of ", length_,
                     " announced elements")));
  }
  if (claim_.adopts_epoch) {
    // Arrived whole: now the epoch moves and the staged data is written.
    ZS_RETURN_IF_ERROR(owner_->PushAdoptEpoch(&claim_));
    for (const StagedChunk& chunk : staged_) {
      ZS_RETURN_IF_ERROR(Write(chunk.data.get(), chunk.n));
    }
    staged_.clear();
  }
  ZS_RETURN_IF_ERROR(writer_->Finish());
  owner_->PushFinished(claim_);
  finished_ = true;
  return absl::OkStatus();
}

}  // namespace zeroshard
