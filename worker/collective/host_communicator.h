// HostCommunicator: the collectives of collective.h on host memory, over any
// Transport (inprocess_transport.h for tests, ucx_transport.h for real
// processes).
//
// Algorithms (P_r = part r, W ranks; bytes per rank equal the ring's):
//   ReduceScatter  direct exchange: every rank sends P_r of its buffer to
//                  rank r, which sums the W contributions in the canonical
//                  tree order (reduce.h). Sends and receives (W-1)·|P|.
//   AllGather      every rank sends its part to every other rank.
//   AllReduce      ReduceScatter then AllGather (same bits as the two).
//   Broadcast      root scatters the parts, then AllGather.
//   Barrier        the header exchange alone.
// Every operation starts with a 40-byte header to every peer (op kind,
// sequence number, count, dtype, root, world size, alignment, local size);
// a peer whose header differs fails the op with INVALID_ARGUMENT naming it.
//
// Hierarchical (options.local_size = G with 1 < G < W, W = M·G, rank =
// node·G + local; node membership from the launcher): reduce-scatter inside
// the node first (each local rank receives, for every node m, the parts
// m·G + local of its node peers and sums them, fp32), then across nodes
// between the ranks of equal local rank, on the reduced slice only (fp32
// partial sums, so bf16 is rounded once); all-gather in the reverse order.
// The result, split and — for G a power of two — the bits equal the flat
// algorithm's (reduce.h). Across nodes each rank moves (M-1)·|P| elements.
//
// Threading: one progress thread per communicator runs the operations in
// issue order; issuing methods may be called from any thread (see
// Communicator). Errors: argument errors INVALID_ARGUMENT at issue time;
// a peer that does not answer within options.op_timeout DEADLINE_EXCEEDED
// naming the missing ranks; a peer known to be gone UNAVAILABLE naming it.
#ifndef ZEROSHARD_WORKER_COLLECTIVE_HOST_COMMUNICATOR_H_
#define ZEROSHARD_WORKER_COLLECTIVE_HOST_COMMUNICATOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/collective/collective.h"
#include "worker/collective/op_queue.h"
#include "worker/collective/transport.h"

namespace zeroshard {
namespace collective {

struct HostCommunicatorOptions {
  uint32_t part_alignment = 1;  // elements; >= 1
  // Ranks per node; 1 or size() means flat. Must divide size().
  int local_size = 1;
  // Longest an operation may wait for its peers.
  absl::Duration op_timeout = absl::Minutes(5);
  // One line per operation on stderr as it starts and ends ("collective:
  // rank R #seq kind(count) start|ok|error"): what a hung or mismatched
  // job's ranks last ran. Also on with ZEROSHARD_COLLECTIVE_TRACE=1.
  bool trace = false;
};

class HostCommunicator : public Communicator {
 public:
  // Takes the transport and starts the progress thread. INVALID_ARGUMENT for
  // bad options.
  static absl::StatusOr<std::unique_ptr<HostCommunicator>> Create(
      std::unique_ptr<Transport> transport, HostCommunicatorOptions options);
  ~HostCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  MemorySpace memory_space() const override { return MemorySpace::kHost; }
  uint32_t part_alignment() const override { return options_.part_alignment; }
  int local_size() const { return local_size_; }

  CollectiveOp AllReduce(void* buf, uint64_t count, DType dtype) override;
  CollectiveOp ReduceScatter(void* buf, uint64_t count, DType dtype) override;
  CollectiveOp AllGather(void* buf, uint64_t count, DType dtype) override;
  CollectiveOp Broadcast(void* buf, uint64_t count, DType dtype,
                         int root) override;
  CollectiveOp Barrier() override;
  // One operation for all segments (collective.h): one header exchange,
  // then each level's transfers of every segment posted together.
  CollectiveOp AllGatherMany(const std::vector<Segment>& segments,
                             DType dtype) override;

 private:
  struct Op;
  struct Transfer;
  class Step;

  HostCommunicator(std::unique_ptr<Transport> transport,
                   HostCommunicatorOptions options);
  CollectiveOp Issue(OpKind kind, void* buf, uint64_t count, DType dtype,
                     int root);
  // Issue for several segments (kAllGatherMany; one for the other kinds).
  CollectiveOp IssueMany(OpKind kind, const std::vector<Segment>& segments,
                         DType dtype, int root);
  CollectiveOp Submit(std::shared_ptr<Op> op);
  absl::Status Run(Op& op, OpStats* stats);
  absl::Status RunReduceScatter(Op& op, Step& first, OpStats* stats);
  absl::Status RunAllGather(Op& op, Step& first, OpStats* stats);
  void AddScatter(Op& op, Step& step);
  absl::Status RunStep(Op& op, Step& step, OpStats* stats);
  absl::Status CheckHeader(const Op& op, int peer, const void* wire) const;

  const int rank_;
  const int size_;
  const HostCommunicatorOptions options_;
  const bool trace_;    // options_.trace or ZEROSHARD_COLLECTIVE_TRACE=1
  int local_size_ = 1;  // G (== size_ when flat)
  std::unique_ptr<Transport> transport_;
  // Progress thread only (run functions).
  std::vector<char> scratch_;
  std::vector<float> partial_;
  std::unique_ptr<OpQueue> queue_;  // stopped first: it uses the above
};

}  // namespace collective
}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_COLLECTIVE_HOST_COMMUNICATOR_H_
