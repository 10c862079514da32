// ParamWindow: stage 3's parameters. Each rank keeps part `rank` of every
// parameter unit of the model (model.h) — or, with offload_param_server,
// nothing — and fills the model's parameter buffer one unit at a time as
// the model's unit hook asks, following the layout's need schedule:
//
//   kNeeded(u):   start u if it is not live or on its way, start the next
//                 `prefetch` units of the need schedule, then wait for u.
//                 Start = copy this rank's part into the model buffer; the
//                 units started by one need are all-gathered (in place) as
//                 one operation (Communicator::AllGatherMany), so u waits
//                 for the units prefetched with it. With offload, fetch
//                 their parts from the shard servers first (one call), and
//                 all-gather them together when the first is needed.
//   kReleased(u): drop u (poison it with NaN, stop counting its bytes)
//                 unless one of the next two needs is u again (the final
//                 norm and embeddings stay live from forward's LM head to
//                 backward's), or u's next need comes before
//                 `reuse_distance` elements of other needs (DeepSpeed's
//                 stage3_max_reuse_distance: a unit forward released
//                 stays for its backward, which then gathers nothing).
//
// Persistent units (at most `persistence_threshold` elements, zero_plan.h
// IsPersistent; DeepSpeed's stage3_param_persistence_threshold): every rank
// keeps them whole in the model buffer, with or without offload.
// FetchPartition fetches each one whole from the servers (4·|unit| bytes
// per rank per refresh instead of 4·|unit|/W; no collective, so a failed
// fetch on one rank cannot leave the others waiting in an all-gather);
// needing one issues nothing, releasing one keeps it, and their bytes are
// counted in partition_bytes(), never in the live window.
//
// Every decision depends on the schedule only, never on timing, so all
// ranks issue the same collectives in the same order.
//
// Threading: one thread (the engine's). Errors: a collective's or a server
// call's status; INTERNAL when the model's calls leave the schedule.
#ifndef ZEROSHARD_WORKER_ENGINE_PARAM_WINDOW_H_
#define ZEROSHARD_WORKER_ENGINE_PARAM_WINDOW_H_

#include <cstdint>
#include <future>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "client/shard_client.h"
#include "worker/collective/collective.h"
#include "worker/engine/model.h"
#include "worker/engine/step_stats.h"
#include "worker/engine/zero_plan.h"

namespace zeroshard::engine {

struct ParamWindowOptions {
  bool offload = false;
  int prefetch = 1;
  bool poison = true;
  // Units of at most this many elements are persistent; 0: none.
  uint64_t persistence_threshold = 0;
  // Keep a released unit needed again within this many elements of the
  // schedule (the needs in between, each unit's size); 0: off.
  uint64_t reuse_distance = 0;
  // FetchPartition fetches the persistent units and issues the fetches of
  // the first parts in the order of their first need (the parts issued
  // together in one ShardClient::GatherRanges call: a request per server);
  // each unit's part is waited for when the unit is first started, which
  // issues the next parts' fetch (a window of prefetch + 2 parts on their
  // way, so that the part needed first arrives first and the rest overlaps
  // the next forward). Its errors then come from OnEvent. Only where a failed
  // fetch ends the run (the engine without recovery).
  bool lazy_fetch = false;
};

class ParamWindow {
 public:
  // `params` is the model's full-size buffer; comm, client (may be null
  // unless offload or FetchPartition is used) and the buffer must outlive
  // the window.
  ParamWindow(const ModelLayout& layout, ParamWindowOptions options,
              collective::Communicator* comm, ShardClient* client,
              absl::Span<float> params);
  ~ParamWindow();  // waits for fetches still writing

  // Where the stats of the current step go (not owned; must be set before
  // any other call).
  void set_stats(StepStats* stats) { stats_ = stats; }

  // Fetches what this rank keeps from the servers: its part of every
  // partitioned unit (none with offload) and every persistent unit whole.
  // After each commit; until the first call persistent units are NaN.
  // With lazy_fetch the parts may still be on their way on return.
  absl::Status FetchPartition();

  // The model's unit hook.
  absl::Status OnEvent(const UnitEvent& event);
  // After each Backward: checks the schedule ran to its end, nothing live.
  absl::Status EndMicroBatch();

  // Bytes kept between uses: this rank's parts (none with offload) plus
  // the persistent units whole.
  uint64_t partition_bytes() const {
    return 4 * (partition_.size() + persistent_elements_);
  }
  // Gathered or in-flight units now (persistent ones not counted).
  uint64_t live_bytes() const { return live_bytes_; }

 private:
  enum class State { kIdle, kInFlight, kLive };
  struct OffloadBatch {
    std::vector<int> units;
    std::shared_future<absl::Status> fetch;  // invalid: no part to fetch
  };
  struct Unit {
    Range range;              // the unit (flat)
    Range part;               // this rank's part (flat)
    uint64_t offset = 0;      // of the part in partition_
    bool persistent = false;  // kept whole, always kLive
    State state = State::kIdle;
    collective::CollectiveOp gather;
    // Shared by the units of one all-gather: its bytes counted yet.
    std::shared_ptr<bool> gather_counted;
    // offload: the units started together, their parts' fetch (one call),
    // until the first of them is finished (then all are all-gathered).
    std::shared_ptr<OffloadBatch> batch;
    // lazy_fetch: the part's (shared by the parts fetched together)
    std::shared_future<absl::Status> part_fetch;
    bool fetch_due = false;  // lazy_fetch: its fetch not issued yet
  };
  // Puts u's part in place and marks it in flight (offload: issues its
  // fetch); its all-gather is StartAll's.
  absl::Status Start(Unit& u);
  // Starts every idle unit of `batch` and all-gathers them as one
  // operation (Communicator::AllGatherMany).
  absl::Status StartAll(const std::vector<int>& batch);
  // Issues one all-gather (AllGatherMany) of these units, shared by them.
  void GatherTogether(const std::vector<int>& indices);
  // lazy_fetch: issues the due fetches in need order until `until`
  // (an index in fetch_order_) is issued, or the window is full.
  void IssueFetches(size_t until);
  absl::Status Finish(Unit& u);
  // GatherRanges(ranges → outs) on its own thread.
  std::shared_future<absl::Status> FetchAsync(std::vector<Range> ranges,
                                              std::vector<void*> outs);
  // Waits for u's lazy part fetch, if any, and forgets it.
  absl::Status WaitPart(Unit& u);
  void Poison(const Unit& u);

  ParamWindowOptions options_;
  collective::Communicator* comm_;
  ShardClient* client_;
  absl::Span<float> params_;
  std::vector<Unit> units_;
  std::vector<int> schedule_;
  std::vector<int> fetch_order_;  // lazy_fetch: parts by first need
  size_t fetch_next_ = 0;         // next in fetch_order_ to issue
  size_t fetch_waited_ = 0;       // fetches waited for since the last
                                  // FetchPartition
  size_t cursor_ = 0;             // next need in schedule_
  std::vector<float> partition_;
  uint64_t persistent_elements_ = 0;
  uint64_t live_bytes_ = 0;
  StepStats* stats_ = nullptr;
};

}  // namespace zeroshard::engine

#endif  // ZEROSHARD_WORKER_ENGINE_PARAM_WINDOW_H_
