#include "worker/engine/grad_reducer.h"

#include <algorithm>
#include <future>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/optim/clip.h"
#include "common/status_macros.h"
#include "worker/engine/op_wait.h"
#include "worker/engine/zero_plan.h"

namespace zeroshard::engine {
namespace {

// x *= s, n floats; nothing for s = 1 (x * 1 is x, bit for bit).
void Scale(float* x, uint64_t n, float s) {
  if (s == 1.0f) return;
  for (uint64_t i = 0; i < n; ++i) x[i] *= s;
}

// dst = src * s, n floats: the copy and Scale in one pass, the same bits.
void ScaledCopy(const float* src, uint64_t n, float s, float* dst) {
  if (s == 1.0f) {
    std::copy(src, src + n, dst);
    return;
  }
  for (uint64_t i = 0; i < n; ++i) dst[i] = src[i] * s;
}

}  // namespace

GradReducer::GradReducer(int stage, uint64_t bucket_size, bool overlap, int gas,
                         collective::Communicator* comm, ShardClient* client,
                         absl::Span<float> grads)
    : stage_(stage),
      overlap_(overlap),
      gas_(gas),
      scale_(
          static_cast<float>(1.0 / (static_cast<double>(comm->size()) * gas))),
      comm_(comm),
      client_(client),
      grads_(grads) {
  const uint32_t align = comm->part_alignment();
  if (comm->size() == 1 && client != nullptr) {
    bucket_size = std::min(bucket_size, kOneRankBucket);
  }
  buckets_ = GradientBuckets(grads.size(), bucket_size, align);
  uint64_t packed = 0;
  for (const Range& b : buckets_) {
    const Range p = PartOf(b, comm->size(), comm->rank(), align);
    parts_.push_back(p);
    if (stage_ <= 1 || gas_ == 1) {
      acc_offset_.push_back(stage_ == 0 ? b.begin : p.begin);  // flat
    } else {
      acc_offset_.push_back(packed);
    }
    packed += p.size();
  }
  acc_size_ = stage_ <= 1 ? grads.size() : packed;
  if (gas_ == 1) {
    acc_base_ = grads.data();  // nothing to accumulate: the parts in place
  } else {
    acc_.assign(acc_size_, 0.0f);
    acc_base_ = acc_.data();
  }
  ops_.resize(buckets_.size());
  scaled_.assign(buckets_.size(), false);
}

GradReducer::~GradReducer() {
  for (auto& f : pushes_) {
    if (f.valid()) f.wait();
  }
}

Range GradReducer::Accumulated(size_t k) const {
  return stage_ == 0 ? buckets_[k] : parts_[k];
}

void GradReducer::BeginMicroBatch(int micro, uint64_t step, uint64_t epoch) {
  first_ = micro == 0;
  last_ = micro + 1 >= gas_;
  step_ = step;
  epoch_ = epoch;
  next_ = 0;
  completed_ = 0;
  first_error_ = absl::OkStatus();
  if (first_) {
    squares_.Reset();  // also: the last step's pieces are read
    scaled_.assign(buckets_.size(), false);
    summing_ = 0;
  }
  stats_->bucket_issue_seconds.assign(buckets_.size(), 0.0);
}

void GradReducer::Issue(size_t k) {
  stats_->bucket_issue_seconds[k] = NowSeconds();
  const Range& b = buckets_[k];
  float* data = grads_.data() + b.begin;
  ops_[k] =
      stage_ == 0
          ? comm_->AllReduce(data, b.size(), collective::DType::kFloat32)
          : comm_->ReduceScatter(data, b.size(), collective::DType::kFloat32);
}

void GradReducer::OnSegment(const GradReady& segment) {
  if (!overlap_) return;
  const size_t end = FinalBuckets(buckets_, next_, segment.range.begin);
  while (next_ < end) Issue(next_++);
  // What has finished meanwhile is accumulated (and pushed) now.
  while (completed_ < next_ && ops_[completed_].Done()) {
    Complete(completed_++).IgnoreError();  // kept in first_error_
  }
}

absl::Status GradReducer::Complete(size_t k) {
  Traffic& t = stage_ == 0 ? stats_->all_reduce : stats_->reduce_scatter;
  absl::Status s = WaitOp(ops_[k], &t, &stats_->comm_wait_seconds);
  ops_[k] = collective::CollectiveOp();
  if (!s.ok()) {
    if (first_error_.ok()) first_error_ = s;
    return s;
  }
  const Range r = Accumulated(k);
  const float* src = grads_.data() + r.begin;
  float* dst = AccData(k);
  // In the last micro-batch the part is final here: FinishStep's multiply,
  // then onto the servers while the rest is still being reduced.
  const bool final = last_ && client_ != nullptr && first_error_.ok();
  if (dst == src) {  // one micro-batch: the part is its own accumulator
    if (final) Scale(dst, r.size(), scale_);
  } else if (first_ && final) {
    ScaledCopy(src, r.size(), scale_, dst);  // one pass: acc = part * scale
  } else {
    if (first_) {
      std::copy(src, src + r.size(), dst);
    } else {
      for (uint64_t i = 0; i < r.size(); ++i) dst[i] += src[i];
    }
    if (final) Scale(dst, r.size(), scale_);
  }
  if (final) {
    scaled_[k] = true;
    PushPart(k);
    Sum(k);
  }
  return absl::OkStatus();
}

void GradReducer::Sum(size_t k) {
  // The buckets complete in index order: the stream's order.
  if (k != summing_) return;
  squares_.AddReversed(PartData(k), parts_[k].size());
  ++summing_;
}

absl::Status GradReducer::EndMicroBatch() {
  const double waited = stats_->comm_wait_seconds;
  for (size_t k = completed_; k < buckets_.size(); ++k) {
    if (k >= next_) Issue(k);   // not overlapped (or not announced)
    Complete(k).IgnoreError();  // kept in first_error_
  }
  next_ = completed_ = buckets_.size();
  stats_->phases.reduce_wait += stats_->comm_wait_seconds - waited;
  return first_error_;
}

void GradReducer::FinishStep(float s) {
  for (size_t k = 0; k < buckets_.size(); ++k) {
    if (scaled_[k]) continue;  // scaled (pushed and queued) by Complete
    Scale(AccData(k), Accumulated(k).size(), s);
    Sum(k);
  }
}

std::vector<GradReducer::Part> GradReducer::OwnParts() const {
  std::vector<Part> out;
  for (size_t k = 0; k < buckets_.size(); ++k) {
    if (parts_[k].empty()) continue;
    out.push_back(Part{parts_[k], PartData(k)});
  }
  return out;
}

void GradReducer::PushPart(size_t k) {
  const Range& p = parts_[k];
  if (p.empty()) return;
  const float* data = PartData(k);
  PushId id;
  id.epoch = epoch_;
  id.step = step_;
  id.slot = 0;
  id.key_prefix = absl::StrCat("w", comm_->rank(), "/s", step_, "/o", p.begin);
  pushes_.push_back(client_->PushAsync(p, v1::DTYPE_FP32, data, std::move(id)));
  stats_->server_push.Add(4 * p.size(), 0);
}

absl::Status GradReducer::Push(uint64_t step, uint64_t epoch) {
  if (client_ == nullptr) return absl::OkStatus();  // stage 0
  step_ = step;
  epoch_ = epoch;
  for (size_t k = 0; k < buckets_.size(); ++k) {
    if (!scaled_[k]) PushPart(k);  // not pushed early
  }
  absl::Status pushed;
  for (auto& f : pushes_) {
    absl::Status s = WaitFuture(f, &stats_->server_wait_seconds);
    if (pushed.ok()) pushed = s;
  }
  pushes_.clear();
  return pushed;
}

}  // namespace zeroshard::engine
