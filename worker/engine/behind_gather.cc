#include "worker/engine/behind_gather.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/helper_threads.h"
#include "worker/engine/op_wait.h"
#include "worker/engine/zero_plan.h"

namespace zeroshard::engine {

BehindGather::BehindGather(const ModelLayout& layout, uint64_t bucket_size,
                           Precision precision, collective::Communicator* comm,
                           ShardClient* client, absl::Span<float> params,
                           uint64_t group_bytes, int lanes_per_server,
                           uint64_t chunk_bytes)
    : precision_(precision),
      group_bytes_(group_bytes),
      lanes_per_server_(std::max(1, lanes_per_server)),
      chunk_bytes_(chunk_bytes),
      comm_(comm),
      client_(client),
      params_(params),
      units_(layout.units) {
  buckets_ = GatherBuckets(units_, bucket_size, &bucket_of_);
  gathers_.resize(buckets_.size());
  std::vector<bool> listed(units_.size(), false);
  for (int u : layout.need_schedule) {
    if (u < 0 || static_cast<size_t>(u) >= units_.size() || listed[u]) {
      continue;
    }
    listed[u] = true;
    fetch_order_.push_back(u);
  }
  for (size_t u = 0; u < units_.size(); ++u) {
    if (!listed[u]) fetch_order_.push_back(static_cast<int>(u));
  }
  // Buckets by the fetch position of their last unit.
  bucket_units_.resize(buckets_.size());
  std::vector<size_t> last(buckets_.size(), 0);
  for (size_t i = 0; i < fetch_order_.size(); ++i) {
    const int b = bucket_of_[fetch_order_[i]];
    bucket_units_[b].push_back(fetch_order_[i]);
    last[b] = i;
  }
  for (size_t b = 0; b < buckets_.size(); ++b) {
    bucket_order_.push_back(static_cast<int>(b));
  }
  std::sort(bucket_order_.begin(), bucket_order_.end(),
            [&](int a, int b) { return last[a] < last[b]; });
}

BehindGather::~BehindGather() { (void)Finish(); }

absl::Status BehindGather::Start(uint64_t step) {
  absl::Status previous = Finish();  // the last ones still write params_
  const int W = comm_->size(), rank = comm_->rank();
  const uint32_t align = comm_->part_alignment();
  const PartitionPlan& plan = client_->plan();
  const uint32_t K = std::max<uint32_t>(1, plan.num_servers());
  unit_promises_.clear();
  unit_promises_.resize(units_.size());
  unit_fetched_.assign(units_.size(), {});
  for (size_t u = 0; u < units_.size(); ++u) {
    unit_fetched_[u] = unit_promises_[u].get_future().share();
  }
  // Each unit's piece to the groups of the server holding its first
  // element, cut into chunks fetched at once.
  const uint64_t a = std::max<uint64_t>(1, plan.alignment());
  const uint64_t chunk = std::max<uint64_t>(a, chunk_bytes_ / 4 / a * a);
  std::vector<std::vector<Group>> groups(K, std::vector<Group>(1));
  std::vector<uint64_t> group_bytes(K, 0);
  for (int u : fetch_order_) {
    const Range part = PartOf(buckets_[bucket_of_[u]], W, rank, align);
    const Range piece{std::max(units_[u].begin, part.begin),
                      std::min(units_[u].end, part.end)};
    if (piece.begin >= piece.end) {
      unit_promises_[u].set_value(absl::OkStatus());  // nothing of it here
      continue;
    }
    uint32_t k = 0;
    while (k + 1 < K && plan.ServerRange(k).end <= piece.begin) ++k;
    Group& g = groups[k].back();
    g.units.push_back(u);
    for (uint64_t b = piece.begin; b < piece.end;) {
      const uint64_t e = std::min(piece.end, b / a * a + chunk);
      g.ranges.push_back(Range{b, e});
      g.outs.push_back(params_.data() + b);
      b = e;
    }
    stats_->server_gather.Add(0, 4 * piece.size());
    group_bytes[k] += 4 * piece.size();
    if (group_bytes[k] >= group_bytes_) {
      groups[k].emplace_back();
      group_bytes[k] = 0;
    }
  }
  // A server's groups dealt to its lanes in turn.
  for (std::vector<Group>& server : groups) {
    if (server.back().units.empty()) server.pop_back();
    const size_t n = std::min<size_t>(lanes_per_server_, server.size());
    std::vector<std::vector<Group>> lanes(n);
    for (size_t i = 0; i < server.size(); ++i) {
      lanes[i % n].push_back(std::move(server[i]));
    }
    for (std::vector<Group>& lane : lanes) {
      lanes_.push_back(HelperThreads::Default().Async(
          [this, lane = std::move(lane), step]() mutable {
            RunLane(std::move(lane), step);
          }));
    }
  }
  bucket_promises_.clear();
  bucket_issued_.clear();
  if (W > 1) {
    bucket_promises_.resize(buckets_.size());
    for (std::promise<absl::Status>& p : bucket_promises_) {
      bucket_issued_.push_back(p.get_future().share());
    }
    issuer_ = HelperThreads::Default().Async(
        [this, fetched = unit_fetched_] { IssueGathers(fetched); });
  }
  return previous;
}

void BehindGather::RunLane(std::vector<Group> groups, uint64_t step) {
  absl::Status failed;
  for (Group& g : groups) {
    if (failed.ok()) {
      uint64_t got = step;
      failed = client_->GatherRanges(g.ranges, v1::DTYPE_FP32, g.outs, &got);
      if (failed.ok() && got != step) {
        failed = absl::AbortedError(absl::StrCat("gathered parameters of step ",
                                                 got, ", expected ", step));
      }
    }
    for (int u : g.units) unit_promises_[u].set_value(failed);
  }
}

void BehindGather::IssueGathers(
    std::vector<std::shared_future<absl::Status>> fetched) {
  for (int b : bucket_order_) {
    absl::Status status;
    for (int u : bucket_units_[b]) {
      const absl::Status s = fetched[u].get();
      if (status.ok()) status = s;
    }
    gathers_[b] =
        comm_->AllGather(params_.data() + buckets_[b].begin, buckets_[b].size(),
                         collective::DType::kFloat32);
    bucket_promises_[b].set_value(status);
  }
}

absl::Status BehindGather::Need(int unit) {
  if (unit < 0 || static_cast<size_t>(unit) >= units_.size()) {
    return absl::InternalError(
        absl::StrCat("the model needs unit ", unit, " of ", units_.size()));
  }
  if (comm_->size() > 1) return WaitBucket(bucket_of_[unit]);
  if (static_cast<size_t>(unit) >= unit_fetched_.size() ||
      !unit_fetched_[unit].valid()) {
    return absl::OkStatus();  // complete already
  }
  absl::Status s = WaitShared(unit_fetched_[unit], &stats_->server_wait_seconds,
                              &stats_->phases.gather);
  if (s.ok()) {
    RoundTo(precision_,
            params_.subspan(units_[unit].begin, units_[unit].size()));
  }
  return s;
}

absl::Status BehindGather::WaitBucket(int b) {
  absl::Status fetched;
  if (static_cast<size_t>(b) < bucket_issued_.size()) {
    fetched = WaitShared(bucket_issued_[b], &stats_->server_wait_seconds,
                         &stats_->phases.gather);
  }
  if (!gathers_[b].has_value()) return fetched;
  const collective::CollectiveOp op = *gathers_[b];
  gathers_[b].reset();
  const double waited = stats_->comm_wait_seconds;
  absl::Status s = WaitOp(op, &stats_->all_gather, &stats_->comm_wait_seconds);
  stats_->phases.all_gather_wait += stats_->comm_wait_seconds - waited;
  if (!fetched.ok()) return fetched;
  if (s.ok()) {
    RoundTo(precision_, params_.subspan(buckets_[b].begin, buckets_[b].size()));
  }
  return s;
}

void BehindGather::JoinIssuer() {
  if (!issuer_.valid()) return;
  issuer_.wait();
  issuer_ = {};
}

absl::Status BehindGather::Finish() {
  JoinIssuer();
  for (std::future<void>& lane : lanes_) lane.wait();
  lanes_.clear();
  absl::Status first;
  if (comm_->size() == 1) {
    for (size_t u = 0; u < unit_fetched_.size(); ++u) {
      absl::Status s = Need(static_cast<int>(u));
      if (first.ok()) first = s;
    }
  }
  unit_fetched_.clear();
  for (size_t b = 0; b < gathers_.size(); ++b) {
    absl::Status s = WaitBucket(static_cast<int>(b));
    if (first.ok()) first = s;
  }
  return first;
}

}  // namespace zeroshard::engine
