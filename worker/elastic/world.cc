#include "worker/elastic/world.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "worker/collective/bootstrap.h"
#include "worker/collective/ucx_communicator.h"

namespace zeroshard::elastic {
namespace {

// Between polls of the membership while waiting for workers or an epoch.
constexpr absl::Duration kPoll = absl::Milliseconds(250);
constexpr absl::Duration kWaitLogInterval = absl::Seconds(5);
// The longest one Rendezvous call waits on the server.
constexpr absl::Duration kRendezvousWait = absl::Milliseconds(1000);

// Errors worth another try while time is left: shard 0 restarting or slow.
bool Transient(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s);
}

// The members of `view` in rank (member id) order.
std::vector<const v1::Member*> InRankOrder(const v1::WorldView& view) {
  std::vector<const v1::Member*> members;
  for (const v1::Member& member : view.members()) members.push_back(&member);
  std::sort(members.begin(), members.end(),
            [](const v1::Member* a, const v1::Member* b) {
              return a->member_id() < b->member_id();
            });
  return members;
}

std::string Names(const std::vector<const v1::Member*>& members) {
  return absl::StrJoin(members, ", ",
                       [](std::string* out, const v1::Member* member) {
                         absl::StrAppend(out, member->worker_name());
                       });
}

// Whether a FormWorld must give up (WorldOptions::stop), and why.
bool Stopped(const std::function<bool()>& stop) { return stop && stop(); }
absl::Status StopError() {
  return absl::CancelledError("no world formed: this worker is leaving");
}

// "epoch E: a, b, c", for messages.
std::string Describe(const v1::WorldView& view) {
  return absl::StrCat("epoch ", view.epoch(), ": ", Names(InRankOrder(view)));
}

// A Bootstrap over MembershipService.Rendezvous for one epoch's group.
class MembershipBootstrap : public collective::Bootstrap {
 public:
  MembershipBootstrap(MembershipClient* m, v1::WorldView view, int rank,
                      absl::Time deadline, std::function<bool()> stop)
      : m_(m),
        view_(std::move(view)),
        rank_(rank),
        deadline_(deadline),
        stop_(std::move(stop)) {}

  int rank() const override { return rank_; }
  int size() const override { return view_.members_size(); }

  // Posts `mine` until the epoch's group is complete. ABORTED when a newer
  // epoch supersedes it (superseded_by()), DEADLINE_EXCEEDED past the
  // deadline naming the members that had not posted, CANCELLED once stop_
  // returns true.
  absl::StatusOr<std::vector<std::string>> AllGather(
      const std::string& mine) override {
    status_ = Gather(mine);
    if (!status_.ok()) return status_;
    return std::vector<std::string>(blobs_.begin(), blobs_.end());
  }

  // How AllGather ended (OK before it ran).
  const absl::Status& status() const { return status_; }
  // The newer epoch that superseded this one, or 0.
  uint64_t superseded_by() const { return superseded_by_; }
  // The epoch's view: the complete answer's once gathered.
  const v1::WorldView& view() const { return view_; }

 private:
  absl::Status Gather(const std::string& mine) {
    const uint64_t epoch = view_.epoch();
    v1::RendezvousResponse last;  // the last incomplete answer
    for (;;) {
      if (Stopped(stop_)) return StopError();
      const absl::Duration left = deadline_ - absl::Now();
      if (left <= absl::ZeroDuration()) {
        return absl::DeadlineExceededError(absl::StrCat(
            "epoch ", epoch,
            " did not form in time; not posted: ", NotPosted(last)));
      }
      const auto wait_ms = static_cast<uint32_t>(
          absl::ToInt64Milliseconds(std::min(left, kRendezvousWait)));
      absl::StatusOr<v1::RendezvousResponse> r =
          m_->Rendezvous(epoch, mine, std::max<uint32_t>(wait_ms, 1));
      if (!r.ok()) {
        if (!Transient(r.status())) return r.status();
        absl::SleepFor(std::min(kPoll, left));
        continue;
      }
      const uint64_t answered = r->world().epoch();
      if (answered > epoch) {
        superseded_by_ = answered;
        return absl::AbortedError(
            absl::StrCat("epoch ", epoch, " was superseded by ", answered, " (",
                         Describe(r->world()), ")"));
      }
      if (!r->complete()) {
        last = *std::move(r);
        continue;
      }
      if (answered != epoch || r->blobs_size() != size() ||
          r->world().members_size() != size() || r->blobs(rank_) != mine) {
        return absl::InternalError(absl::StrCat(
            "the rendezvous of epoch ", epoch, " (", size(),
            " members) answered epoch ", answered, " with ", r->blobs_size(),
            " addresses for ", r->world().members_size(), " members"));
      }
      view_ = r->world();
      blobs_.assign(r->blobs().begin(), r->blobs().end());
      return absl::OkStatus();
    }
  }

  // The members that had not posted by the `last` incomplete answer: those
  // with an empty address when it lists one per member, else every member
  // but this one.
  std::string NotPosted(const v1::RendezvousResponse& last) const {
    const v1::WorldView& view =
        last.world().epoch() == view_.epoch() ? last.world() : view_;
    std::vector<const v1::Member*> members = InRankOrder(view);
    std::vector<const v1::Member*> missing;
    const bool per_member = last.blobs_size() == view.members_size();
    for (size_t r = 0; r < members.size(); ++r) {
      const bool posted = per_member
                              ? !last.blobs(static_cast<int>(r)).empty()
                              : members[r]->member_id() == m_->member_id();
      if (!posted) missing.push_back(members[r]);
    }
    return missing.empty() ? "(none known)" : Names(missing);
  }

  MembershipClient* const m_;
  v1::WorldView view_;
  const int rank_;
  const absl::Time deadline_;
  const std::function<bool()> stop_;
  absl::Status status_;
  uint64_t superseded_by_ = 0;
  std::vector<std::string> blobs_;
};

// The current view, this member in it: refreshes, and joins again when
// this member expired, left or is missing from the view.
absl::StatusOr<v1::WorldView> CurrentView(MembershipClient* m) {
  if (m->member_id() != 0 && !m->expired()) {
    absl::StatusOr<v1::WorldView> view = m->Refresh();
    if (view.ok() && RankOf(*view, m->member_id()) >= 0) return view;
    if (!view.ok() && !absl::IsNotFound(view.status())) return view;
  }
  ZS_RETURN_IF_ERROR(m->Join());
  return m->world();
}

}  // namespace

int RankOf(const v1::WorldView& view, uint64_t member_id) {
  int rank = 0;
  bool found = false;
  for (const v1::Member& member : view.members()) {
    if (member.member_id() < member_id) ++rank;
    if (member.member_id() == member_id) found = true;
  }
  return found ? rank : -1;
}

absl::StatusOr<World> FormWorld(MembershipClient* m, const WorldOptions& o) {
  if (m == nullptr || o.min_workers < 1) {
    return absl::InvalidArgumentError(
        "FormWorld needs a MembershipClient and min_workers >= 1");
  }
  const absl::Time deadline = absl::Now() + o.timeout;
  auto log = [&](const std::string& line) {
    if (o.log) o.log(line);
  };
  absl::Time last_wait_log = absl::InfinitePast();
  std::string waiting = "no answer from the membership service";
  for (;;) {
    if (Stopped(o.stop)) return StopError();
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("no world formed within ",
                       absl::FormatDuration(o.timeout), ": ", waiting));
    }
    absl::StatusOr<v1::WorldView> view = CurrentView(m);
    if (!view.ok()) {
      if (!Transient(view.status()) && !absl::IsNotFound(view.status())) {
        return view.status();
      }
      waiting = view.status().ToString();
      absl::SleepFor(kPoll);
      continue;
    }
    if (o.check) ZS_RETURN_IF_ERROR(o.check(*view));
    const int rank = RankOf(*view, m->member_id());
    const int size = view->members_size();
    if (rank < 0 || view->epoch() < o.min_epoch || size < o.min_workers) {
      waiting =
          rank < 0 ? absl::StrCat("member ", m->member_id(), " is not in ",
                                  Describe(*view))
          : view->epoch() < o.min_epoch
              ? absl::StrCat("waiting for epoch ", o.min_epoch, "; at ",
                             Describe(*view))
              : absl::StrCat("waiting for ", o.min_workers, " workers; ", size,
                             " in the group (", Describe(*view), ")");
      if (absl::Now() - last_wait_log >= kWaitLogInterval) {
        last_wait_log = absl::Now();
        log(waiting);
      }
      absl::SleepFor(kPoll);
      continue;
    }
    MembershipBootstrap bootstrap(m, *view, rank, deadline, o.stop);
    absl::StatusOr<std::unique_ptr<collective::HostCommunicator>> comm =
        collective::CreateUcxCommunicator(bootstrap, o.comm, o.transport);
    if (!comm.ok()) {
      const absl::Status& why =
          bootstrap.status().ok() ? comm.status() : bootstrap.status();
      if (absl::IsCancelled(bootstrap.status())) return bootstrap.status();
      if (bootstrap.superseded_by() != 0 || absl::IsNotFound(why)) {
        waiting = why.ToString();
        continue;  // a newer epoch, or this member expired: again
      }
      return why;
    }
    World world;
    world.epoch = view->epoch();
    world.rank = rank;
    world.size = size;
    world.view = bootstrap.view();
    world.comm = *std::move(comm);
    log(absl::StrCat("epoch ", world.epoch, ": rank ", rank, " of ", size,
                     " (members: ", Names(InRankOrder(world.view)), ")"));
    return world;
  }
}

}  // namespace zeroshard::elastic
