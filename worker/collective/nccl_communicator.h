// NcclCommunicator: the collectives of collective.h on device memory (one
// GPU per rank), under --config=cuda.
//
// Same split and same reduction order as the host backends, so the bits
// agree across backends: ReduceScatter is a grouped ncclSend/ncclRecv of the
// parts (direct exchange, (W-1)·|P| bytes each way) into a device staging
// buffer, then DeviceReduceTree (reduce_cuda.h) sums the W contributions in
// the canonical tree order; AllGather is a grouped send/recv of the parts
// (parts may be uneven, which ncclAllGather does not allow); AllReduce is
// the two; Broadcast is ncclBroadcast; Barrier a one-element ncclAllReduce.
// Operations run in issue order on a progress thread, on the
// communicator's own CUDA stream; an op is done when its work on the stream
// is. Buffers must be device memory of the communicator's device.
//
// Errors: argument errors INVALID_ARGUMENT; an op that does not finish
// within op_timeout aborts the NCCL communicator (DEADLINE_EXCEEDED); NCCL
// and CUDA failures INTERNAL with their text. Mismatched calls across ranks
// are not detected (NCCL has no cheap way): they time out.
// Built without --config=cuda, Create fails with FAILED_PRECONDITION
// "built without --config=cuda".
#ifndef ZEROSHARD_WORKER_COLLECTIVE_NCCL_COMMUNICATOR_H_
#define ZEROSHARD_WORKER_COLLECTIVE_NCCL_COMMUNICATOR_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/collective/bootstrap.h"
#include "worker/collective/collective.h"

namespace zeroshard {
namespace collective {

struct NcclCommunicatorOptions {
  int device = 0;  // CUDA device of this rank
  uint32_t part_alignment = 1;
  absl::Duration op_timeout = absl::Minutes(5);
};

// Rank 0 makes the ncclUniqueId; `bootstrap` hands it to the others.
// Blocks until every rank joined. W <= kMaxDeviceTreeInputs (64).
absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    Bootstrap& bootstrap, const NcclCommunicatorOptions& options);

}  // namespace collective
}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_COLLECTIVE_NCCL_COMMUNICATOR_H_
