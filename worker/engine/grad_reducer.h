// GradReducer: the GradPath (grad_path.h) that reduces each micro-batch's
// gradients among the workers bucket by bucket (zero_plan.h), accumulates
// this rank's reduced parts over the micro-batches of a step and, at the
// step, pushes them to the servers that own them (stages 1-3). The arithmetic
// is the same in every stage, so the accumulated parts are bit-identical across
// stages:
//
//   per micro-batch m, per bucket (backward order): reduce-scatter (stage 0:
//   all-reduce, which equals reduce-scatter + all-gather bit for bit) of the
//   model's gradient buffer in place, then acc = part (m = 0) or
//   acc += part (m > 0), in fp32;
//   at the step: acc *= 1/(W·gas) (one fp32 multiply);
//   the sum of squares of this rank's parts: fp64 (SquareSum) over them in
//   reduction order, buckets in index order and each part's elements in
//   descending order: for one rank, the gradient from its last element to
//   its first, the order backward finishes it, whatever the buckets.
//
// With overlap, a bucket's collective is issued from the gradient hook as
// soon as backward has finished every gradient in it, and all are waited for
// after backward; without, they run one at a time after backward. A bucket
// whose collective has finished is accumulated at once — from the gradient
// hook, while backward continues, when overlap is on — and in the step's
// last micro-batch also scaled and pushed to its servers (stages 1-3), so
// that the pushes overlap what is left of backward and of the reduction;
// its sum of squares is queued then too, on a thread of its own
// (SquaresBehind). Only the moment changes, never the arithmetic or the
// collectives' order: the bits are those of accumulating, scaling and
// summing after backward.
//
// Where the accumulator lives: stages 0 and 1 keep a full-size buffer
// (stage 0 accumulates whole buckets; stage 1 only its parts, but holds the
// full-size buffer for the step, as ZeRO-1 does); stages 2 and 3 keep only
// their parts, packed. With one micro-batch per step there is nothing to
// accumulate: the parts stay where the reduction left them, in the model's
// gradient buffer, scaled there and pushed from there (no copy, and no
// memory beyond the model's buffer).
//
// Threading: one thread (the engine's), but SumSquares may run beside
// Push; the summing thread only reads the parts.
#ifndef ZEROSHARD_WORKER_ENGINE_GRAD_REDUCER_H_
#define ZEROSHARD_WORKER_ENGINE_GRAD_REDUCER_H_

#include <cstdint>
#include <future>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "client/shard_client.h"
#include "worker/collective/collective.h"
#include "worker/engine/grad_path.h"
#include "worker/engine/model.h"
#include "worker/engine/squares_behind.h"
#include "worker/engine/step_stats.h"

namespace zeroshard::engine {

class GradReducer : public GradPath {
 public:
  // With one rank and servers, the largest bucket: there is nothing to
  // reduce, so whatever `bucket_size` says the gradient goes to the
  // servers in pieces of at most 16M elements as backward finishes them
  // (with one rank the bits do not depend on the buckets).
  static constexpr uint64_t kOneRankBucket = 16'000'000;

  // `grads`: the model's gradient buffer; it, `comm` and `client` (stages
  // 1-3; null at stage 0) must outlive the reducer.
  // `gas`: micro-batches per step (the last one pushes).
  GradReducer(int stage, uint64_t bucket_size, bool overlap, int gas,
              collective::Communicator* comm, ShardClient* client,
              absl::Span<float> grads);
  ~GradReducer() override;  // waits for pushes still reading the parts

  // Records traffic, waits and bucket_issue_seconds.
  void set_stats(StepStats* stats) override { stats_ = stats; }

  void BeginMicroBatch(int micro, uint64_t step, uint64_t epoch) override;
  void OnSegment(const GradReady& segment) override;
  // Reduces what is left, waits, accumulates.
  absl::Status EndMicroBatch() override;

  // acc *= scale over this rank's parts (stage 0: everything); `scale`
  // must be 1/(W·gas), which the parts pushed early already carry.
  void FinishStep(float scale) override;
  // After FinishStep: waits for the sum queued behind.
  double SumSquares() const override { return squares_.Total(); }
  bool summed_on_servers() const override { return false; }
  // Push only reads the parts too (its RPC threads and the engine's).
  bool sum_beside_push() const override { return client_ != nullptr; }
  // Pushes each non-empty part not pushed yet as slot 0 of the step and
  // waits for every push of the step.
  absl::Status Push(uint64_t step, uint64_t epoch) override;
  uint32_t contributions_per_step() const override { return 1; }
  uint64_t acc_bytes() const override { return 4 * acc_size_; }
  absl::Span<const float> full() const override {
    return stage_ == 0 ? absl::Span<const float>(acc_base_, acc_size_)
                       : absl::Span<const float>();
  }

  // This rank's reduced parts: (flat range, data) for each non-empty one.
  struct Part {
    Range range;
    const float* data;
  };
  std::vector<Part> OwnParts() const;

  const std::vector<Range>& buckets() const { return buckets_; }

 private:
  void Issue(size_t k);
  // Waits for bucket k's collective, accumulates it, and in the last
  // micro-batch scales and pushes it. Buckets complete in order.
  absl::Status Complete(size_t k);
  void PushPart(size_t k);
  // Queues bucket k's part on squares_ when it is the next in the stream.
  void Sum(size_t k);
  Range Accumulated(size_t k) const;  // flat range of bucket k kept in acc
  // Where Accumulated(k) is kept, and this rank's part of it.
  float* AccData(size_t k) const { return acc_base_ + acc_offset_[k]; }
  float* PartData(size_t k) const {
    return AccData(k) + (parts_[k].begin - Accumulated(k).begin);
  }

  const int stage_;
  const bool overlap_;
  const int gas_;
  const float scale_;  // 1/(W·gas)
  collective::Communicator* comm_;
  ShardClient* client_;
  absl::Span<float> grads_;
  std::vector<Range> buckets_;        // reduction order
  std::vector<Range> parts_;          // this rank's part of each bucket
  std::vector<uint64_t> acc_offset_;  // of Accumulated(k) in acc_base_
  std::vector<float> acc_;            // the accumulator (gas > 1; else empty)
  float* acc_base_;                   // acc_, or the model's buffer (gas = 1)
  uint64_t acc_size_;                 // floats the accumulator holds
  std::vector<collective::CollectiveOp> ops_;
  size_t next_ = 0;       // next bucket to issue
  size_t completed_ = 0;  // buckets accumulated in this micro-batch
  bool first_ = true;
  bool last_ = true;  // the step's last micro-batch
  uint64_t step_ = 0, epoch_ = 0;
  std::vector<bool> scaled_;  // bucket k's part scaled (and pushed)
  size_t summing_ = 0;        // buckets queued on squares_ this step
  mutable SquaresBehind squares_;
  std::vector<std::future<absl::Status>> pushes_;  // this step's
  absl::Status first_error_;  // of this micro-batch's collectives
  StepStats* stats_ = nullptr;
};

}  // namespace zeroshard::engine

#endif  // ZEROSHARD_WORKER_ENGINE_GRAD_REDUCER_H_
