#include "server/membership/membership.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/client_text.h"

namespace zeroshard {
namespace {

// How often a waiting Rendezvous looks at the leases at least (the
// injected clock cannot say when the next one runs out in real time).
constexpr int64_t kExpiryPollMs = 100;

std::string Members(size_t n) {
  return absl::StrCat(n, n == 1 ? " member" : " members");
}

absl::Status NotAMember(const std::string& job_id, uint64_t member_id) {
  return absl::NotFoundError(absl::StrCat(
      "member ", member_id, " of job '", ClientText(job_id),
      "' is not in the group (its lease expired or it left); join again"));
}

// INVALID_ARGUMENT naming `field` unless `value` is min..max bytes of
// printable ASCII.
absl::Status CheckField(const char* field, const std::string& value, size_t min,
                        size_t max) {
  if (value.size() < min || value.size() > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " is ", value.size(), " bytes ('",
                     ClientText(value), "'); it must be ", min, " to ", max));
  }
  for (char c : value) {
    if (c < 0x20 || c > 0x7e) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, " '", ClientText(value),
                       "' holds a byte that is not printable ASCII"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

Membership::Membership(MembershipOptions options)
    : options_(std::move(options)) {}

int64_t Membership::Now() const {
  if (options_.now_ms) return options_.now_ms();
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

absl::Status Membership::CheckJobId(const std::string& job_id) {
  if (job_id.empty()) return absl::InvalidArgumentError("job_id is empty");
  return CheckField("job_id", job_id, 1, kMaxJobIdBytes);
}

void Membership::Log(const std::string& job_id, const Job& job,
                     const std::string& what) const {
  if (!options_.log) return;
  options_.log(absl::StrCat("membership: job '", ClientText(job_id), "' epoch ",
                            job.epoch, ": ", what, " (",
                            Members(job.members.size()), ")"));
}

v1::WorldView Membership::ViewLocked(const Job& job) const {
  v1::WorldView view;
  view.set_epoch(job.epoch);
  view.set_step(options_.committed_step ? options_.committed_step() : 0);
  view.set_failure(job.failure);
  uint32_t rank = 0;
  for (const auto& [id, m] : job.members) {
    v1::Member* out = view.add_members();
    *out = m.info;
    out->set_rank(rank++);
  }
  return view;
}

void Membership::RecordFailureLocked(const std::string& job_id, Job* job,
                                     const std::string& failure) {
  if (failure.empty() || !job->failure.empty()) return;
  size_t n = std::min(failure.size(), kMaxFailureBytes);
  // Cut at a UTF-8 character boundary (a proto3 string must stay valid).
  while (n < failure.size() && n > 0 &&
         (static_cast<unsigned char>(failure[n]) & 0xC0) == 0x80) {
    --n;
  }
  job->failure = failure.substr(0, n);
  Log(job_id, *job,
      absl::StrCat("the job failed: ", EscapeClientText(job->failure)));
}

void Membership::ClearFailureIfIdleLocked(const std::string& job_id, Job* job) {
  if (job->failure.empty() || !job->members.empty()) return;
  job->failure.clear();
  Log(job_id, *job, "a worker joins after the job failed: failure cleared");
}

void Membership::BumpEpochLocked(Job* job) {
  ++job->epoch;
  job->blobs.clear();
  changed_.SignalAll();
}

void Membership::RemoveLocked(const std::string& job_id, Job* job,
                              uint64_t member_id, bool expired) {
  auto it = job->members.find(member_id);
  const std::string name = it->second.info.worker_name();
  job->members.erase(it);
  BumpEpochLocked(job);
  Log(job_id, *job,
      absl::StrCat(expired ? "lease of member " : "member ", member_id, " ('",
                   ClientText(name), expired ? "') expired" : "') left"));
}

void Membership::ExpireLocked(const std::string& job_id, Job* job,
                              int64_t now) {
  std::vector<uint64_t> dead;
  for (const auto& [id, m] : job->members) {
    if (now >= m.deadline_ms) dead.push_back(id);
  }
  for (uint64_t id : dead) RemoveLocked(job_id, job, id, /*expired=*/true);
}

absl::StatusOr<Membership::Job*> Membership::FindMember(
    const std::string& job_id, uint64_t member_id, int64_t now) {
  if (absl::Status s = CheckJobId(job_id); !s.ok()) return s;
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return NotAMember(job_id, member_id);
  ExpireLocked(job_id, &it->second, now);
  if (it->second.members.count(member_id) == 0) {
    return NotAMember(job_id, member_id);
  }
  return &it->second;
}

absl::StatusOr<v1::JoinResponse> Membership::Join(const v1::JoinRequest& req) {
  if (absl::Status s = CheckJobId(req.job_id()); !s.ok()) return s;
  if (req.worker_name().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker_name is empty (job '", ClientText(req.job_id()), "')"));
  }
  for (absl::Status s :
       {CheckField("worker_name", req.worker_name(), 1, kMaxNameBytes),
        CheckField("address", req.address(), 0, kMaxNameBytes),
        CheckField("node", req.node(), 0, kMaxNameBytes)}) {
    if (!s.ok()) return s;
  }
  const int64_t now = Now();
  absl::MutexLock l(&mu_);
  auto it = jobs_.find(req.job_id());
  if (it == jobs_.end()) {
    if (jobs_.size() >= static_cast<size_t>(options_.max_jobs)) {
      // Make room by forgetting a job nobody is a member of any more.
      auto idle = std::find_if(jobs_.begin(), jobs_.end(), [](const auto& j) {
        return j.second.members.empty();
      });
      if (idle == jobs_.end()) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "cannot add job '", ClientText(req.job_id()),
            "': ", options_.max_jobs, " jobs already have members"));
      }
      jobs_.erase(idle);
    }
    it = jobs_.emplace(req.job_id(), Job()).first;
  }
  Job* job = &it->second;
  ExpireLocked(req.job_id(), job, now);
  ClearFailureIfIdleLocked(req.job_id(), job);
  auto old = std::find_if(
      job->members.begin(), job->members.end(), [&](const auto& m) {
        return m.second.info.worker_name() == req.worker_name();
      });
  if (old == job->members.end() &&
      job->members.size() >= options_.max_members) {
    return absl::ResourceExhaustedError(
        absl::StrCat("job '", ClientText(req.job_id()), "' already has ",
                     job->members.size(), " members (the most it may have)"));
  }
  std::string replaced;
  if (old != job->members.end()) {
    replaced = absl::StrCat(", replacing member ", old->first);
    job->members.erase(old);  // the epoch bump below covers both changes
  }
  const uint64_t id = job->next_member_id++;
  MemberState& m = job->members[id];
  m.info.set_member_id(id);
  m.info.set_worker_name(req.worker_name());
  m.info.set_address(req.address());
  m.info.set_local_rank(req.local_rank());
  m.info.set_local_size(req.local_size());
  m.info.set_node(req.node());
  m.deadline_ms = now + options_.lease_ms;
  BumpEpochLocked(job);
  Log(req.job_id(), *job,
      absl::StrCat("worker '", ClientText(req.worker_name()),
                   "' joined as member ", id, replaced));
  v1::JoinResponse resp;
  resp.set_member_id(id);
  resp.set_lease_ms(static_cast<uint64_t>(options_.lease_ms));
  *resp.mutable_world() = ViewLocked(*job);
  return resp;
}

absl::StatusOr<v1::HeartbeatResponse> Membership::Heartbeat(
    const v1::HeartbeatRequest& req) {
  const int64_t now = Now();
  absl::MutexLock l(&mu_);
  absl::StatusOr<Job*> job = FindMember(req.job_id(), req.member_id(), now);
  if (!job.ok()) return job.status();
  (*job)->members[req.member_id()].deadline_ms = now + options_.lease_ms;
  v1::HeartbeatResponse resp;
  *resp.mutable_world() = ViewLocked(**job);
  return resp;
}

absl::StatusOr<v1::LeaveResponse> Membership::Leave(
    const v1::LeaveRequest& req) {
  const int64_t now = Now();
  absl::MutexLock l(&mu_);
  absl::StatusOr<Job*> job = FindMember(req.job_id(), req.member_id(), now);
  if (!job.ok()) return job.status();
  RecordFailureLocked(req.job_id(), *job, req.failure());
  RemoveLocked(req.job_id(), *job, req.member_id(), /*expired=*/false);
  v1::LeaveResponse resp;
  *resp.mutable_world() = ViewLocked(**job);
  return resp;
}

absl::StatusOr<v1::RendezvousResponse> Membership::Rendezvous(
    const v1::RendezvousRequest& req) {
  if (req.blob().size() > options_.max_blob_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("blob of ", req.blob().size(), " bytes is over the ",
                     options_.max_blob_bytes, "-byte limit"));
  }
  const absl::Time give_up =
      absl::Now() + absl::Milliseconds(
                        std::min<int64_t>(req.wait_ms(), kMaxRendezvousWaitMs));
  v1::RendezvousResponse resp;
  absl::MutexLock l(&mu_);
  int64_t now = Now();
  absl::StatusOr<Job*> found = FindMember(req.job_id(), req.member_id(), now);
  if (!found.ok()) return found.status();
  Job* job = *found;
  if (req.epoch() > job->epoch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "epoch ", req.epoch(), " of job '", ClientText(req.job_id()),
        "' has not started (the current epoch is ", job->epoch, ")"));
  }
  job->members[req.member_id()].deadline_ms = now + options_.lease_ms;
  if (req.epoch() == job->epoch && req.epoch() != job->formed_epoch) {
    size_t others = 0;
    for (const auto& [id, blob] : job->blobs) {
      if (id != req.member_id()) others += blob.size();
    }
    if (others + req.blob().size() > options_.max_epoch_blob_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the blobs of epoch ", job->epoch, " of job '",
                       ClientText(req.job_id()), "' would exceed ",
                       options_.max_epoch_blob_bytes, " bytes"));
    }
    job->blobs[req.member_id()] = req.blob();
    if (job->blobs.size() == job->members.size()) {
      job->formed_epoch = job->epoch;
      job->formed_world = ViewLocked(*job);
      job->formed_blobs.clear();
      for (const auto& [id, blob] : job->blobs)
        job->formed_blobs.push_back(blob);
      changed_.SignalAll();
    }
  }
  // Wait while the epoch is current but not formed yet.
  while (req.epoch() == job->epoch && req.epoch() != job->formed_epoch) {
    const absl::Duration left = give_up - absl::Now();
    if (left <= absl::ZeroDuration()) break;
    changed_.WaitWithTimeout(&mu_,
                             std::min(left, absl::Milliseconds(kExpiryPollMs)));
    // The job may have been dropped and the member replaced meanwhile.
    now = Now();
    auto it = jobs_.find(req.job_id());
    if (it == jobs_.end()) return NotAMember(req.job_id(), req.member_id());
    job = &it->second;
    auto self = job->members.find(req.member_id());
    if (self != job->members.end()) {
      self->second.deadline_ms = now + options_.lease_ms;  // still calling
    }
    ExpireLocked(req.job_id(), job, now);
    if (req.epoch() != job->formed_epoch &&
        job->members.count(req.member_id()) == 0) {
      return NotAMember(req.job_id(), req.member_id());
    }
  }
  if (req.epoch() != 0 && req.epoch() == job->formed_epoch) {
    resp.set_complete(true);
    *resp.mutable_world() = job->formed_world;
    for (const std::string& b : job->formed_blobs) resp.add_blobs(b);
  } else {
    *resp.mutable_world() = ViewLocked(*job);
  }
  return resp;
}

}  // namespace zeroshard
