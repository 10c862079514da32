// BehindGather: stages 1-2's parameter refresh behind the next forward
// (without recovery; engine.h). After each commit Start() fetches this
// rank's piece of every model unit (its share of the unit's all-gather
// bucket, zero_plan.h GatherBuckets) in the order the forward first needs
// the units (ModelLayout::need_schedule): consecutive pieces held by one
// shard server go in one ShardClient::GatherRanges call of about 16 MiB
// (a group), each piece cut into chunks of at most 8 MiB that the call
// fetches at once; each server's groups are dealt in turn to its four
// lanes, each lane fetching its groups in that order, so every server
// streams at once on several calls, and a large unit (GPT-2's wte, needed
// first) arrives on many. With more than one rank a thread issues each bucket's
// all-gather once its pieces are in. Need(u), from the model's unit hook,
// waits for what unit u needs: its piece with one rank, its bucket's
// all-gather with more. So the forward starts on the first units while the
// rest still arrive, and the bits are those of fetching everything first:
// each element is fetched or gathered once, and rounded (fp16/bf16) once,
// when its unit or bucket is complete.
//
// Collective order: the issuing thread takes the buckets in a fixed order
// (by the fetch order of their last unit), the same on every rank, waiting
// for each one's pieces. The engine issues nothing else on the
// communicator until JoinIssuer() (at Backward and before the step's
// collectives) has seen that thread end.
//
// Threading: Start, Need, JoinIssuer and Finish on the engine's thread. The
// lanes write only the pieces they fetch; the issuer only the all-gathers'
// handles; each is published by a future the engine's thread waits for
// first, and neither touches the stats. Errors: a failed or stale fetch
// (ABORTED naming the steps) comes back from Need or Finish of the units
// it covers; a lane that failed fetches no more, and the issuer still
// issues every all-gather so that the ranks stay in step.
#ifndef ZEROSHARD_WORKER_ENGINE_BEHIND_GATHER_H_
#define ZEROSHARD_WORKER_ENGINE_BEHIND_GATHER_H_

#include <cstdint>
#include <future>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "client/shard_client.h"
#include "worker/collective/collective.h"
#include "worker/engine/model.h"
#include "worker/engine/precision.h"
#include "worker/engine/step_stats.h"

namespace zeroshard::engine {

class BehindGather {
 public:
  // One fetch call's pieces: about this many bytes (fewer at the end).
  static constexpr uint64_t kGroupBytes = uint64_t{16} << 20;
  // Fetch calls in flight per server.
  static constexpr int kLanesPerServer = 4;
  // A piece is fetched in chunks of at most this many bytes, all at once:
  // a little under 8 MiB, so that a chunk with its shared-memory header
  // fills a power-of-two segment (client/shared_memory.h).
  static constexpr uint64_t kChunkBytes = (uint64_t{8} << 20) - 4096;

  // `params`: the model's parameter buffer; it, `comm` and `client` must
  // outlive the object. `bucket_size`: ZeroOptions::allgather_bucket_size.
  // `group_bytes`: a fetch call ends once its pieces reach this many bytes;
  // `lanes_per_server`: fetch calls in flight per server; `chunk_bytes`:
  // the largest chunk of a piece.
  BehindGather(const ModelLayout& layout, uint64_t bucket_size,
               Precision precision, collective::Communicator* comm,
               ShardClient* client, absl::Span<float> params,
               uint64_t group_bytes = kGroupBytes,
               int lanes_per_server = kLanesPerServer,
               uint64_t chunk_bytes = kChunkBytes);
  ~BehindGather();  // Finish()

  // Where waits and traffic are recorded (not owned; set before Start).
  void set_stats(StepStats* stats) { stats_ = stats; }

  // Finishes the previous refresh, then starts fetching the parameters of
  // servers' step `step` (returns once the thread runs). The previous
  // refresh's error, if any.
  absl::Status Start(uint64_t step);
  // Unit `unit` of the layout is about to be used: waits until its
  // parameters are complete. INTERNAL for an index outside the layout.
  absl::Status Need(int unit);
  // Waits for the fetch thread to end (every all-gather issued).
  void JoinIssuer();
  // Everything Start began is done: fetched, all-gathered, rounded. The
  // first error among what was not waited for yet.
  absl::Status Finish();

  int num_buckets() const { return static_cast<int>(buckets_.size()); }

 private:
  struct Group {  // one GatherRanges call
    std::vector<Range> ranges;
    std::vector<void*> outs;
    std::vector<int> units;  // whose pieces these are
  };
  // A lane: its groups one after the other; fulfils the units' promises.
  void RunLane(std::vector<Group> groups, uint64_t step);
  // The issuer (more than one rank): each bucket's all-gather, in
  // bucket_order_, once its units' pieces are in (`fetched`: the unit
  // futures, the thread's own copies).
  void IssueGathers(std::vector<std::shared_future<absl::Status>> fetched);
  absl::Status WaitBucket(int b);

  const Precision precision_;
  const uint64_t group_bytes_;
  const int lanes_per_server_;
  const uint64_t chunk_bytes_;
  collective::Communicator* const comm_;
  ShardClient* const client_;
  const absl::Span<float> params_;
  std::vector<Range> units_;      // the layout's units
  std::vector<int> fetch_order_;  // every unit once, first needed first
  std::vector<Range> buckets_;
  std::vector<int> bucket_of_;     // unit -> bucket
  std::vector<int> bucket_order_;  // the issuer's order
  std::vector<std::vector<int>> bucket_units_;
  // Per unit, its piece fetched (the engine waits for these with one
  // rank); per bucket, its all-gather issued (in gathers_; more ranks).
  // Valid until waited for.
  std::vector<std::promise<absl::Status>> unit_promises_, bucket_promises_;
  std::vector<std::shared_future<absl::Status>> unit_fetched_, bucket_issued_;
  std::vector<std::optional<collective::CollectiveOp>> gathers_;
  std::vector<std::future<void>> lanes_;
  std::future<void> issuer_;  // IssueGathers on a helper thread
  StepStats* stats_ = nullptr;
};

}  // namespace zeroshard::engine

#endif  // ZEROSHARD_WORKER_ENGINE_BEHIND_GATHER_H_
