// The collectives layer of the ZeRO engine: all-reduce, reduce-scatter,
// all-gather, broadcast and barrier over fp32 or bf16 buffers, with
// asynchronous completion.
//
// Backends (one file pair each):
//   host_communicator.h   host memory; the algorithms, over a Transport:
//     inprocess_transport.h  W ranks as threads of one process (tests)
//     ucx_transport.h        UCX tag API (shared memory, TCP), across
//                            processes and machines; tcp_bootstrap.h finds
//                            the peers
//   nccl_communicator.h   device memory (NCCL), under --config=cuda
//
// Semantics (every backend):
//   * Every rank issues the same sequence of operations with the same count,
//     dtype (and root); a mismatch that the backend detects fails the
//     operation with INVALID_ARGUMENT naming the peer and both calls.
//   * Split: part r of a count-element buffer is
//     AlignedPartRange(count, size(), r, part_alignment()) (partition.h), the
//     rule the ZeRO engine and the shard servers use. Parts may be empty and
//     uneven; count need not be a multiple of size().
//   * All operations work in place on the caller's buffer:
//       AllReduce      buf = sum over ranks of buf;
//       ReduceScatter  buf[part(rank)] = sum over ranks of buf[part(rank)];
//                      the rest of buf is left unspecified;
//       AllGather      input buf[part(rank)] on each rank; output: all of
//                      buf on every rank;
//       Broadcast      buf = buf of `root`;
//       Barrier        completes once every rank has issued it.
//   * Reduction order (reduce.h): element i of the sum is computed in a fixed
//     order that depends only on the number of ranks, never on timing: a
//     pairwise tree over ranks 0..W-1 whose left subtree holds the largest
//     power of two below W (W=4: (r0+r1)+(r2+r3); W=3: (r0+r1)+r2). AllReduce
//     is ReduceScatter followed by AllGather, so both give the same bits.
//     bf16 inputs are widened to fp32, summed in fp32 and rounded once (round
//     to nearest even).
//   * Asynchrony: each call returns at once with a CollectiveOp handle.
//     Operations of one communicator run in issue order on the backend's
//     progress thread, overlapping the caller's work. The buffer must stay
//     alive and untouched by the caller until the op is done.
//
// Errors: absl::Status, no exceptions. After an operation fails the
// communicator is broken: later operations fail with FAILED_PRECONDITION
// carrying the first error (the ranks can no longer be assumed in step).
#ifndef ZEROSHARD_WORKER_COLLECTIVE_COLLECTIVE_H_
#define ZEROSHARD_WORKER_COLLECTIVE_COLLECTIVE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/partition.h"
#include "worker/collective/types.h"  // DType

namespace zeroshard {
namespace collective {

size_t DTypeSize(DType dtype);
const char* DTypeName(DType dtype);  // "fp32", "bf16"

enum class OpKind : uint8_t {
  kAllReduce = 1,
  kReduceScatter = 2,
  kAllGather = 3,
  kBroadcast = 4,
  kBarrier = 5,
  kAllGatherMany = 6,
};
const char* OpKindName(OpKind kind);  // "AllReduce", ...

enum class MemorySpace { kHost, kDevice };

// Payload bytes one rank moved in one operation (the small per-peer headers
// that check the ranks agree are not counted). With W ranks, P = the part
// size in bytes (count/W for even splits): reduce-scatter and all-gather
// each send and receive (W-1)·P, all-reduce twice that — the ring figures.
struct OpStats {
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
};

// Shared state behind a CollectiveOp; completed once by the backend.
// Thread-safe.
class OpState {
 public:
  // Records the outcome and wakes waiters. Only the first call counts.
  void Complete(absl::Status status, OpStats stats);
  absl::Status Wait();
  bool Done() const;
  OpStats stats() const;

 private:
  mutable absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  OpStats stats_ ABSL_GUARDED_BY(mu_);
};

// Handle of an issued operation. Cheap to copy; copies share the state.
// Any thread may call any method.
class CollectiveOp {
 public:
  CollectiveOp() = default;  // a handle to nothing: Wait() fails
  explicit CollectiveOp(std::shared_ptr<OpState> state)
      : state_(std::move(state)) {}

  // Blocks until the operation finished; returns its status.
  absl::Status Wait() const;
  // True once the operation finished (Wait() would not block).
  bool Done() const;
  // Bytes moved; final once Done().
  OpStats stats() const;

  // An already-finished op (argument errors found at issue time).
  static CollectiveOp Finished(absl::Status status);

 private:
  std::shared_ptr<OpState> state_;
};

// One rank's view of a group of `size()` ranks.
//
// Threading: the issuing methods may be called from any thread, but the
// order of calls defines the order of operations, which must be the same on
// every rank; use one issuing thread (or serialise them). The destructor
// fails operations still pending with CANCELLED and waits until none
// touches its buffer any more.
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual MemorySpace memory_space() const = 0;
  // Alignment (elements) of part boundaries; >= 1.
  virtual uint32_t part_alignment() const = 0;

  // Part r of a count-element buffer (see the file comment).
  Range PartRange(uint64_t count, int r) const {
    return AlignedPartRange(count, static_cast<uint32_t>(size()),
                            static_cast<uint32_t>(r), part_alignment());
  }

  virtual CollectiveOp AllReduce(void* buf, uint64_t count, DType dtype) = 0;
  virtual CollectiveOp ReduceScatter(void* buf, uint64_t count,
                                     DType dtype) = 0;
  virtual CollectiveOp AllGather(void* buf, uint64_t count, DType dtype) = 0;
  virtual CollectiveOp Broadcast(void* buf, uint64_t count, DType dtype,
                                 int root) = 0;
  virtual CollectiveOp Barrier() = 0;

  // Several all-gathers as one operation: segment s ends as
  // AllGather(segments[s].buf, segments[s].count, dtype) leaves it (part r
  // of each segment split as PartRange(count_s, r)); every rank passes the
  // same counts in the same order. The handle completes when every
  // segment is done. This default issues one AllGather per segment and
  // returns the last (a communicator's operations complete in issue order
  // and a failure fails every later one, so the last one's wait covers
  // all; its stats are the last segment's only); HostCommunicator fuses
  // them into one operation (one header exchange and one transfer step
  // per level for all segments). None: an op that is already done.
  struct Segment {
    void* buf = nullptr;
    uint64_t count = 0;
  };
  virtual CollectiveOp AllGatherMany(const std::vector<Segment>& segments,
                                     DType dtype);
};

}  // namespace collective
}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_COLLECTIVE_COLLECTIVE_H_
