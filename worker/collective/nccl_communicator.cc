#include "worker/collective/nccl_communicator.h"

#ifndef ZEROSHARD_HAVE_CUDA

namespace zeroshard {
namespace collective {

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    Bootstrap&, const NcclCommunicatorOptions&) {
  return absl::FailedPreconditionError("built without --config=cuda");
}

}  // namespace collective
}  // namespace zeroshard

#else  // ZEROSHARD_HAVE_CUDA

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "worker/collective/op_queue.h"
#include "worker/collective/reduce_cuda.h"

namespace zeroshard {
namespace collective {
namespace {

absl::Status CudaCheck(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorName(e), ": ",
                                          cudaGetErrorString(e)));
}

absl::Status NcclCheck(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", ncclGetErrorString(r)));
}

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(int rank, int size, NcclCommunicatorOptions options)
      : rank_(rank), size_(size), options_(options) {}

  ~NcclCommunicator() override {
    if (queue_ != nullptr) queue_->Shutdown();
    if (scratch_ != nullptr) cudaFree(scratch_);
    if (comm_ != nullptr) ncclCommDestroy(comm_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  absl::Status Init(Bootstrap& bootstrap) {
    if (size_ > kMaxDeviceTreeInputs) {
      return absl::InvalidArgumentError(absl::StrCat(
          "NCCL communicator: at most ", kMaxDeviceTreeInputs, " ranks"));
    }
    ZS_RETURN_IF_ERROR(
        CudaCheck(cudaSetDevice(options_.device), "cudaSetDevice"));
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    std::string mine;
    if (rank_ == 0) {
      ZS_RETURN_IF_ERROR(NcclCheck(ncclGetUniqueId(&id), "ncclGetUniqueId"));
      mine.assign(reinterpret_cast<const char*>(&id), sizeof(id));
    }
    ZS_ASSIGN_OR_RETURN(std::vector<std::string> blobs,
                        bootstrap.AllGather(mine));
    if (blobs[0].size() != sizeof(id)) {
      return absl::InvalidArgumentError("NCCL bootstrap: bad unique id");
    }
    std::memcpy(&id, blobs[0].data(), sizeof(id));
    ZS_RETURN_IF_ERROR(
        CudaCheck(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                  "cudaStreamCreate"));
    ZS_RETURN_IF_ERROR(NcclCheck(ncclCommInitRank(&comm_, size_, id, rank_),
                                 "ncclCommInitRank"));
    queue_ = std::make_unique<OpQueue>(nullptr);
    return absl::OkStatus();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  MemorySpace memory_space() const override { return MemorySpace::kDevice; }
  uint32_t part_alignment() const override { return options_.part_alignment; }

  CollectiveOp AllReduce(void* buf, uint64_t count, DType dtype) override {
    return Issue(OpKind::kAllReduce, buf, count, dtype, 0);
  }
  CollectiveOp ReduceScatter(void* buf, uint64_t count, DType dtype) override {
    return Issue(OpKind::kReduceScatter, buf, count, dtype, 0);
  }
  CollectiveOp AllGather(void* buf, uint64_t count, DType dtype) override {
    return Issue(OpKind::kAllGather, buf, count, dtype, 0);
  }
  CollectiveOp Broadcast(void* buf, uint64_t count, DType dtype,
                         int root) override {
    return Issue(OpKind::kBroadcast, buf, count, dtype, root);
  }
  CollectiveOp Barrier() override {
    return Issue(OpKind::kBarrier, nullptr, 0, DType::kFloat32, 0);
  }

 private:
  CollectiveOp Issue(OpKind kind, void* buf, uint64_t count, DType dtype,
                     int root) {
    if (count > 0 && buf == nullptr) {
      return CollectiveOp::Finished(absl::InvalidArgumentError(
          absl::StrCat(OpKindName(kind), ": null buffer")));
    }
    if (root < 0 || root >= size_) {
      return CollectiveOp::Finished(absl::InvalidArgumentError(
          absl::StrCat(OpKindName(kind), ": root ", root, " out of range")));
    }
    char* p = static_cast<char*>(buf);
    return queue_->Submit(absl::StrFormat("%s (count %d, %s)", OpKindName(kind),
                                          count, DTypeName(dtype)),
                          [=](uint64_t, OpStats* stats) {
                            return Run(kind, p, count, dtype, root, stats);
                          });
  }

  absl::Status Run(OpKind kind, char* buf, uint64_t count, DType dtype,
                   int root, OpStats* stats) {
    ZS_RETURN_IF_ERROR(
        CudaCheck(cudaSetDevice(options_.device), "cudaSetDevice"));
    const absl::Time deadline = absl::Now() + options_.op_timeout;
    switch (kind) {
      case OpKind::kReduceScatter:
        ZS_RETURN_IF_ERROR(EnqueueReduceScatter(buf, count, dtype, stats));
        break;
      case OpKind::kAllGather:
        ZS_RETURN_IF_ERROR(EnqueueAllGather(buf, count, dtype, stats));
        break;
      case OpKind::kAllReduce:
        ZS_RETURN_IF_ERROR(EnqueueReduceScatter(buf, count, dtype, stats));
        ZS_RETURN_IF_ERROR(EnqueueAllGather(buf, count, dtype, stats));
        break;
      case OpKind::kBroadcast: {
        const size_t bytes = count * DTypeSize(dtype);
        ZS_RETURN_IF_ERROR(NcclCheck(
            ncclBroadcast(buf, buf, bytes, ncclUint8, root, comm_, stream_),
            "ncclBroadcast"));
        (rank_ == root ? stats->bytes_sent : stats->bytes_received) += bytes;
        break;
      }
      case OpKind::kBarrier:
        ZS_RETURN_IF_ERROR(EnsureScratch(sizeof(float)));
        ZS_RETURN_IF_ERROR(
            NcclCheck(ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum,
                                    comm_, stream_),
                      "ncclAllReduce"));
        break;
      case OpKind::kAllGatherMany:  // issued as AllGathers (collective.h)
        return absl::InternalError("NCCL: AllGatherMany is never run whole");
    }
    return WaitStream(deadline);
  }

  absl::Status EnsureScratch(size_t bytes) {
    if (bytes <= scratch_bytes_) return absl::OkStatus();
    if (scratch_ != nullptr) {
      ZS_RETURN_IF_ERROR(CudaCheck(cudaStreamSynchronize(stream_), "sync"));
      cudaFree(scratch_);
      scratch_ = nullptr;
    }
    ZS_RETURN_IF_ERROR(CudaCheck(cudaMalloc(&scratch_, bytes), "cudaMalloc"));
    scratch_bytes_ = bytes;
    return absl::OkStatus();
  }

  absl::Status EnqueueReduceScatter(char* buf, uint64_t count, DType dtype,
                                    OpStats* stats) {
    if (size_ == 1) return absl::OkStatus();
    const size_t es = DTypeSize(dtype);
    const Range mine = PartRange(count, rank_);
    const size_t slot = mine.size() * es;
    ZS_RETURN_IF_ERROR(EnsureScratch(std::max<size_t>(size_ * slot, 1)));
    char* staging = static_cast<char*>(scratch_);
    ZS_RETURN_IF_ERROR(NcclCheck(ncclGroupStart(), "ncclGroupStart"));
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      const Range theirs = PartRange(count, r);
      if (!theirs.empty()) {
        ncclSend(buf + theirs.begin * es, theirs.size() * es, ncclUint8, r,
                 comm_, stream_);
        stats->bytes_sent += theirs.size() * es;
      }
      if (!mine.empty()) {
        ncclRecv(staging + r * slot, slot, ncclUint8, r, comm_, stream_);
        stats->bytes_received += slot;
      }
    }
    ZS_RETURN_IF_ERROR(
        NcclCheck(ncclGroupEnd(), "ncclGroupEnd (reduce-scatter)"));
    std::vector<const void*> inputs(size_);
    for (int r = 0; r < size_; ++r) {
      inputs[r] = r == rank_ ? buf + mine.begin * es : staging + r * slot;
    }
    const std::string err =
        DeviceReduceTree(inputs.data(), size_, dtype, buf + mine.begin * es,
                         dtype, mine.size(), stream_);
    if (!err.empty()) return absl::InternalError(err);
    return absl::OkStatus();
  }

  absl::Status EnqueueAllGather(char* buf, uint64_t count, DType dtype,
                                OpStats* stats) {
    if (size_ == 1) return absl::OkStatus();
    const size_t es = DTypeSize(dtype);
    const Range mine = PartRange(count, rank_);
    ZS_RETURN_IF_ERROR(NcclCheck(ncclGroupStart(), "ncclGroupStart"));
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      const Range theirs = PartRange(count, r);
      if (!mine.empty()) {
        ncclSend(buf + mine.begin * es, mine.size() * es, ncclUint8, r, comm_,
                 stream_);
        stats->bytes_sent += mine.size() * es;
      }
      if (!theirs.empty()) {
        ncclRecv(buf + theirs.begin * es, theirs.size() * es, ncclUint8, r,
                 comm_, stream_);
        stats->bytes_received += theirs.size() * es;
      }
    }
    return NcclCheck(ncclGroupEnd(), "ncclGroupEnd (all-gather)");
  }

  // Polls the stream until its work is done, the deadline passes (the
  // communicator is aborted) or NCCL reports an asynchronous error.
  absl::Status WaitStream(absl::Time deadline) {
    while (true) {
      const cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaSuccess) return absl::OkStatus();
      if (e != cudaErrorNotReady) return CudaCheck(e, "collective on stream");
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        ncclCommAbort(comm_);
        comm_ = nullptr;
        return absl::UnavailableError(
            absl::StrCat("NCCL: ", ncclGetErrorString(async)));
      }
      if (absl::Now() >= deadline || queue_->stopping()) {
        ncclCommAbort(comm_);
        comm_ = nullptr;
        return absl::DeadlineExceededError(absl::StrCat(
            "NCCL collective did not finish within ",
            absl::FormatDuration(options_.op_timeout), " (a peer missing?)"));
      }
      absl::SleepFor(absl::Microseconds(50));
    }
  }

  const int rank_;
  const int size_;
  const NcclCommunicatorOptions options_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* scratch_ = nullptr;  // progress thread only
  size_t scratch_bytes_ = 0;
  std::unique_ptr<OpQueue> queue_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    Bootstrap& bootstrap, const NcclCommunicatorOptions& options) {
  auto c = std::make_unique<NcclCommunicator>(bootstrap.rank(),
                                              bootstrap.size(), options);
  ZS_RETURN_IF_ERROR(c->Init(bootstrap));
  return std::unique_ptr<Communicator>(std::move(c));
}

}  // namespace collective
}  // namespace zeroshard

#endif  // ZEROSHARD_HAVE_CUDA
