#include "worker/engine/grad_pusher.h"

#include "absl/strings/str_cat.h"
#include "worker/engine/op_wait.h"
#include "worker/engine/zero_plan.h"

namespace zeroshard::engine {

GradPusher::GradPusher(uint64_t bucket_size, uint32_t alignment, bool overlap,
                       int world, int rank, int gas, ShardClient* client,
                       absl::Span<float> grads)
    : overlap_(overlap),
      world_(world),
      rank_(rank),
      gas_(gas),
      scale_(static_cast<float>(1.0 / (static_cast<double>(world) * gas))),
      client_(client),
      grads_(grads),
      buckets_(GradientBuckets(grads.size(), bucket_size, alignment)) {}

GradPusher::~GradPusher() {
  for (auto& f : pushes_) {
    if (f.valid()) f.wait();
  }
}

void GradPusher::BeginMicroBatch(int micro, uint64_t step, uint64_t epoch) {
  WaitPushes();
  micro_ = micro;
  step_ = step;
  epoch_ = epoch;
  next_ = 0;
  stats_->bucket_issue_seconds.assign(buckets_.size(), 0.0);
}

void GradPusher::Issue(size_t k) {
  stats_->bucket_issue_seconds[k] = NowSeconds();
  const Range& b = buckets_[k];
  float* data = grads_.data() + b.begin;
  for (uint64_t i = 0; i < b.size(); ++i) data[i] *= scale_;
  PushId id;
  id.epoch = epoch_;
  id.step = step_;
  id.slot = static_cast<uint32_t>(micro_ * world_ + rank_);
  id.key_prefix =
      absl::StrCat("w", rank_, "/s", step_, "/m", micro_, "/o", b.begin);
  pushes_.push_back(client_->PushAsync(b, v1::DTYPE_FP32, data, std::move(id)));
  stats_->server_push.Add(4 * b.size(), 0);
}

void GradPusher::OnSegment(const GradReady& segment) {
  if (!overlap_) return;
  const size_t end = FinalBuckets(buckets_, next_, segment.range.begin);
  while (next_ < end) Issue(next_++);
}

absl::Status GradPusher::EndMicroBatch() {
  while (next_ < buckets_.size()) Issue(next_++);
  return absl::OkStatus();
}

void GradPusher::WaitPushes() {
  for (auto& f : pushes_) {
    absl::Status s = WaitFuture(f, &stats_->server_wait_seconds);
    if (status_.ok()) status_ = s;
  }
  pushes_.clear();
}

absl::Status GradPusher::Push(uint64_t step, uint64_t epoch) {
  WaitPushes();
  absl::Status s = std::move(status_);
  status_ = absl::OkStatus();
  return s;
}

}  // namespace zeroshard::engine
