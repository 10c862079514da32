#include "worker/engine/param_window.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/helper_threads.h"
#include "common/status_macros.h"
#include "worker/engine/op_wait.h"

namespace zeroshard::engine {

ParamWindow::ParamWindow(const ModelLayout& layout, ParamWindowOptions options,
                         collective::Communicator* comm, ShardClient* client,
                         absl::Span<float> params)
    : options_(options), comm_(comm), client_(client), params_(params) {
  uint64_t offset = 0;
  for (const Range& range : layout.units) {
    Unit u;
    u.range = range;
    u.part = PartOf(range, comm->size(), comm->rank(), comm->part_alignment());
    u.offset = offset;
    u.persistent = IsPersistent(range, options_.persistence_threshold);
    if (u.persistent) {
      u.state = State::kLive;
      persistent_elements_ += range.size();
    } else if (!options_.offload) {
      offset += u.part.size();
    }
    units_.push_back(std::move(u));
  }
  partition_.assign(offset, 0.0f);
  schedule_ = layout.need_schedule;
  std::vector<bool> listed(units_.size(), false);
  for (int index : schedule_) {
    if (index < 0 || static_cast<size_t>(index) >= units_.size()) continue;
    const Unit& u = units_[index];
    if (listed[index] || u.persistent || u.part.empty()) continue;
    listed[index] = true;
    fetch_order_.push_back(index);
  }
  for (const Unit& u : units_) Poison(u);
}

void ParamWindow::IssueFetches(size_t until) {
  const size_t window = static_cast<size_t>(std::max(options_.prefetch, 0)) + 2;
  std::vector<Range> ranges;
  std::vector<void*> outs;
  std::vector<int> batch;
  while (fetch_next_ < fetch_order_.size() &&
         (fetch_next_ <= until || fetch_next_ < fetch_waited_ + window)) {
    const int index = fetch_order_[fetch_next_++];
    Unit& u = units_[index];
    if (!u.fetch_due) continue;
    u.fetch_due = false;
    ranges.push_back(u.part);
    outs.push_back(partition_.data() + u.offset);
    batch.push_back(index);
    stats_->server_gather.Add(0, 4 * u.part.size());
  }
  if (batch.empty()) return;
  const std::shared_future<absl::Status> f = FetchAsync(ranges, outs);
  for (int index : batch) units_[index].part_fetch = f;
}

std::shared_future<absl::Status> ParamWindow::FetchAsync(
    std::vector<Range> ranges, std::vector<void*> outs) {
  // One call: each server's pieces go in one request (GatherRanges).
  return HelperThreads::Default()
      .Async([this, ranges = std::move(ranges), outs = std::move(outs)] {
        return client_->GatherRanges(ranges, v1::DTYPE_FP32, outs);
      })
      .share();
}

ParamWindow::~ParamWindow() {
  for (Unit& u : units_) {
    if (u.part_fetch.valid()) u.part_fetch.wait();
    if (u.batch != nullptr && u.batch->fetch.valid()) u.batch->fetch.wait();
  }
}

absl::Status ParamWindow::FetchPartition() {
  absl::Status first;
  for (Unit& u : units_) {  // a lazy fetch not waited for yet
    absl::Status s = WaitPart(u);
    if (first.ok()) first = s;
  }
  const bool lazy = options_.lazy_fetch && !options_.offload;
  std::vector<Range> ranges;
  std::vector<void*> outs;
  for (Unit& u : units_) {
    // A persistent unit whole, in place; otherwise this rank's part.
    const Range r = u.persistent       ? u.range
                    : options_.offload ? Range()
                                       : u.part;
    if (r.empty()) continue;
    if (lazy && !u.persistent) {
      u.fetch_due = true;  // issued by IssueFetches
      continue;
    }
    ranges.push_back(r);
    outs.push_back(u.persistent ? params_.data() + r.begin
                                : partition_.data() + u.offset);
    stats_->server_gather.Add(0, 4 * r.size());
  }
  if (lazy) {
    fetch_next_ = fetch_waited_ = 0;
    IssueFetches(0);
  }
  if (!ranges.empty()) {  // one call: a request per server
    const double start = NowSeconds();
    absl::Status s = client_->GatherRanges(ranges, v1::DTYPE_FP32, outs);
    stats_->server_wait_seconds += NowSeconds() - start;
    if (first.ok()) first = s;
  }
  return first;
}

absl::Status ParamWindow::WaitPart(Unit& u) {
  return WaitShared(u.part_fetch, &stats_->server_wait_seconds);
}

void ParamWindow::Poison(const Unit& u) {
  if (!options_.poison) return;
  std::fill(params_.begin() + u.range.begin, params_.begin() + u.range.end,
            std::numeric_limits<float>::quiet_NaN());
}

absl::Status ParamWindow::Start(Unit& u) {
  if (u.state != State::kIdle) return absl::OkStatus();
  if (u.fetch_due || u.part_fetch.valid()) {  // lazy_fetch: its part
    if (u.fetch_due) {
      const auto at =
          std::find(fetch_order_.begin(), fetch_order_.end(), &u - &units_[0]);
      IssueFetches(static_cast<size_t>(at - fetch_order_.begin()));
    }
    const double fetched = stats_->server_wait_seconds;
    absl::Status s = WaitPart(u);
    stats_->phases.gather += stats_->server_wait_seconds - fetched;
    ++fetch_waited_;
    IssueFetches(0);  // keep the window full
    ZS_RETURN_IF_ERROR(s);
  }
  u.state = State::kInFlight;
  live_bytes_ += 4 * u.range.size();
  stats_->peak_live_param_bytes =
      std::max(stats_->peak_live_param_bytes, live_bytes_);
  if (options_.offload) return absl::OkStatus();  // fetched by StartAll
  std::copy(partition_.begin() + u.offset,
            partition_.begin() + u.offset + u.part.size(),
            params_.begin() + u.part.begin);
  return absl::OkStatus();  // its all-gather: StartAll
}

absl::Status ParamWindow::StartAll(const std::vector<int>& batch) {
  std::vector<int> started;
  absl::Status status;
  for (int index : batch) {
    Unit& u = units_[index];
    if (u.state != State::kIdle) continue;
    status = Start(u);
    if (!status.ok()) break;
    started.push_back(index);
  }
  if (started.empty()) return status;
  if (options_.offload) {
    // The parts from the servers in one call (a request per server); the
    // units are all-gathered together once the first of them is needed
    // (Finish).
    auto b = std::make_shared<OffloadBatch>();
    b->units = started;
    std::vector<Range> ranges;
    std::vector<void*> outs;
    for (int index : started) {
      const Unit& u = units_[index];
      if (u.part.empty()) continue;
      ranges.push_back(u.part);
      outs.push_back(params_.data() + u.part.begin);
      stats_->server_gather.Add(0, 4 * u.part.size());
    }
    if (!ranges.empty()) b->fetch = FetchAsync(ranges, outs);
    for (int index : started) units_[index].batch = b;
    return status;
  }
  // Whatever was started is all-gathered, also after an error, so that
  // this rank issues what the others do as far as it can.
  GatherTogether(started);
  return status;
}

void ParamWindow::GatherTogether(const std::vector<int>& indices) {
  std::vector<collective::Communicator::Segment> segments;
  for (int index : indices) {
    const Unit& u = units_[index];
    segments.push_back({params_.data() + u.range.begin, u.range.size()});
  }
  const collective::CollectiveOp op =
      comm_->AllGatherMany(segments, collective::DType::kFloat32);
  auto counted = std::make_shared<bool>(false);
  for (int index : indices) {
    units_[index].gather = op;
    units_[index].gather_counted = counted;
  }
}

absl::Status ParamWindow::Finish(Unit& u) {
  if (u.state == State::kLive) return absl::OkStatus();
  if (options_.offload && u.batch != nullptr) {
    // The first of its batch needed: the batch's parts, then one
    // all-gather for all of them.
    const std::shared_ptr<OffloadBatch> b = std::move(u.batch);
    for (int index : b->units) units_[index].batch = nullptr;
    ZS_RETURN_IF_ERROR(WaitShared(b->fetch, &stats_->server_wait_seconds,
                                  &stats_->phases.gather));
    GatherTogether(b->units);
  }
  const double waited = stats_->comm_wait_seconds;
  // Units all-gathered together share one op: its bytes count once.
  Traffic unused;
  const bool counted = u.gather_counted != nullptr && *u.gather_counted;
  absl::Status s = WaitOp(u.gather, counted ? &unused : &stats_->all_gather,
                          &stats_->comm_wait_seconds);
  if (u.gather_counted != nullptr) *u.gather_counted = true;
  stats_->phases.all_gather_wait += stats_->comm_wait_seconds - waited;
  ZS_RETURN_IF_ERROR(s);
  u.gather = collective::CollectiveOp();
  u.gather_counted = nullptr;
  u.state = State::kLive;
  return absl::OkStatus();
}

absl::Status ParamWindow::OnEvent(const UnitEvent& e) {
  const int index = e.unit;
  if (index < 0 || static_cast<size_t>(index) >= units_.size()) {
    return absl::InternalError(absl::StrCat("stage 3: the model names unit ",
                                            index, " of ", units_.size()));
  }
  Unit& u = units_[index];
  // Persistent units are always live: Start and Finish leave them alone.
  if (e.kind == UnitEvent::Kind::kNeeded) {
    if (cursor_ >= schedule_.size() || schedule_[cursor_] != index) {
      return absl::InternalError(
          absl::StrCat("stage 3: the model needs parameter unit ", index,
                       " out of schedule (position ", cursor_, ")"));
    }
    // u and the next `prefetch` needs, all-gathered as one operation.
    std::vector<int> batch = {index};
    ++cursor_;
    for (size_t j = cursor_;
         j < std::min(schedule_.size(), cursor_ + options_.prefetch); ++j) {
      if (std::find(batch.begin(), batch.end(), schedule_[j]) == batch.end()) {
        batch.push_back(schedule_[j]);
      }
    }
    ZS_RETURN_IF_ERROR(StartAll(batch));
    return Finish(u);
  }
  // kReleased: keep persistent units, what the next two needs use again
  // and what is needed again within the reuse distance.
  if (u.persistent) return absl::OkStatus();
  for (size_t j = cursor_; j < std::min(schedule_.size(), cursor_ + 2); ++j) {
    if (schedule_[j] == index) return absl::OkStatus();
  }
  uint64_t between = 0;
  for (size_t j = cursor_;
       j < schedule_.size() && between < options_.reuse_distance; ++j) {
    if (schedule_[j] == index) return absl::OkStatus();
    between += units_[schedule_[j]].range.size();
  }
  if (u.state != State::kLive) {
    return absl::InternalError(
        absl::StrCat("stage 3: unit ", index, " released but not live"));
  }
  u.state = State::kIdle;
  live_bytes_ -= 4 * u.range.size();
  Poison(u);
  return absl::OkStatus();
}

absl::Status ParamWindow::EndMicroBatch() {
  if (cursor_ != schedule_.size() || live_bytes_ != 0) {
    return absl::InternalError(absl::StrCat(
        "stage 3: micro-batch ended at schedule position ", cursor_, " of ",
        schedule_.size(), " with ", live_bytes_, " bytes live"));
  }
  cursor_ = 0;
  return absl::OkStatus();
}

}  // namespace zeroshard::engine
