// Membership: the worker groups of elastic jobs, hosted by shard 0 (the
// logic behind zeroshard.v1.MembershipService; no gRPC here, the adapter
// is server/membership_service.h).
//
// Per job: members join under a stable worker name and get a member id
// (1, 2, ... per job); the member set changes on every join, leave and
// lease expiry, and each change starts a new epoch (1 for a job's first
// member). Ranks are dense: members sorted by member id, rank = index.
// A member's lease (lease_ms) is renewed by Heartbeat and Rendezvous;
// expiry is checked lazily at the start of every call and while
// Rendezvous waits, so the survivors' calls remove a dead member.
//
// Rendezvous forms the collective group of one epoch: every member of the
// epoch posts its transport address (blob); the call that completes the
// set forms the epoch and everyone, also a late poller, gets its view and
// blobs in rank order. See RendezvousRequest in proto/zeroshard.proto.
//
// Example (one worker):
//   Membership m(MembershipOptions{});
//   auto joined = m.Join(join_request);              // epoch 1, rank 0
//   rendezvous.set_member_id(joined->member_id());
//   rendezvous.set_epoch(joined->world().epoch());
//   auto group = m.Rendezvous(rendezvous);           // complete: 1 blob
//
// Job failure: a member that hits a permanent error leaves with
// LeaveRequest.failure; the job keeps that text (the first one, at most
// kMaxFailureBytes) and every view answered for the job carries it
// (WorldView.failure), so that the other members stop instead of forming
// a new group. The next Join into the job once it has no members clears
// it (a new run of the job).
//
// Bounds (one member's data cannot break the others' answers): job_id
// 1..kMaxJobIdBytes, worker_name 1..kMaxNameBytes, address and node
// 0..kMaxNameBytes bytes, each printable ASCII (0x20..0x7e); at most
// max_members members per job and max_epoch_blob_bytes of blobs per
// epoch, so a WorldView or a Rendezvous answer stays far below gRPC's
// 4 MiB message limit.
//
// Errors: INVALID_ARGUMENT naming the field for an empty, over-long or
// non-printable job id, worker name, address or node, a blob over
// max_blob_bytes or an epoch that does not exist yet; NOT_FOUND for a
// member id that is not in its job's group (expired or left: join again);
// RESOURCE_EXHAUSTED for a new job past max_jobs, a new member past
// max_members or blobs past max_epoch_blob_bytes. A rejected call changes
// nothing. Messages and log lines quote client strings through ClientText
// (escaped, bounded: common/client_text.h).
//
// Threading: every method is thread-safe; Rendezvous blocks its caller for
// at most min(wait_ms, 2000) ms.
#ifndef ZEROSHARD_SERVER_MEMBERSHIP_MEMBERSHIP_H_
#define ZEROSHARD_SERVER_MEMBERSHIP_MEMBERSHIP_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/zeroshard.pb.h"

namespace zeroshard {

struct MembershipOptions {
  int64_t lease_ms = 10000;
  // Milliseconds of a monotonic clock; null: std::chrono::steady_clock.
  std::function<int64_t()> now_ms;
  // The job's committed steps, for WorldView.step; null: 0.
  std::function<uint64_t()> committed_step;
  // One line per change of a member set; null: none. Called under the
  // membership's lock: it must not call back into the Membership.
  std::function<void(const std::string&)> log;
  int max_jobs = 64;
  size_t max_blob_bytes = 65536;
  size_t max_members = 1024;                      // per job
  size_t max_epoch_blob_bytes = size_t{2} << 20;  // all blobs of an epoch
};

inline constexpr size_t kMaxJobIdBytes = 128;  // as ModelSpec.job_id
inline constexpr size_t kMaxNameBytes = 255;

// Longest a Rendezvous call waits, whatever its wait_ms.
inline constexpr int64_t kMaxRendezvousWaitMs = 2000;
// Longest job failure text kept (LeaveRequest.failure is cut there).
inline constexpr size_t kMaxFailureBytes = 4096;

class Membership {
 public:
  explicit Membership(MembershipOptions options);
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  // Adds the worker to its job's group (a member of the same worker name
  // is replaced: the old id leaves, the worker gets a new id).
  absl::StatusOr<v1::JoinResponse> Join(const v1::JoinRequest& req)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Renews the member's lease; answers the current view.
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& req) ABSL_LOCKS_EXCLUDED(mu_);
  // Removes the member; answers the view after it left.
  absl::StatusOr<v1::LeaveResponse> Leave(const v1::LeaveRequest& req)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Posts the member's blob for req.epoch() and waits (see the top of the
  // file) until that epoch is formed or the epoch changes.
  absl::StatusOr<v1::RendezvousResponse> Rendezvous(
      const v1::RendezvousRequest& req) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct MemberState {
    v1::Member info;  // rank filled when a view is made
    int64_t deadline_ms = 0;
  };
  struct Job {
    uint64_t next_member_id = 1;
    uint64_t epoch = 0;                       // 0: never had a member
    std::map<uint64_t, MemberState> members;  // by member id = rank order
    std::map<uint64_t, std::string> blobs;    // of `epoch`, by member id
    // The last formed epoch (0: none) with its view and blobs.
    uint64_t formed_epoch = 0;
    v1::WorldView formed_world;
    std::vector<std::string> formed_blobs;
    // Non-empty: the job failed (the top of the file).
    std::string failure;
  };

  int64_t Now() const;
  // INVALID_ARGUMENT for an empty, over-long or non-printable job id.
  static absl::Status CheckJobId(const std::string& job_id);
  // The job, or NOT_FOUND naming the member when it or the member is
  // unknown (after expiring the job's dead leases).
  absl::StatusOr<Job*> FindMember(const std::string& job_id, uint64_t member_id,
                                  int64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes members whose lease ran out (one epoch per removal).
  void ExpireLocked(const std::string& job_id, Job* job, int64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes a member (it left, or its lease expired) and starts a new
  // epoch.
  void RemoveLocked(const std::string& job_id, Job* job, uint64_t member_id,
                    bool expired) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records `failure` (LeaveRequest.failure) as the job's failure unless
  // it is empty or one is recorded already.
  void RecordFailureLocked(const std::string& job_id, Job* job,
                           const std::string& failure)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets the job's failure when it has no members (a Join starts a new
  // run of the job).
  void ClearFailureIfIdleLocked(const std::string& job_id, Job* job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts a new epoch of `job` and wakes waiting Rendezvous calls.
  void BumpEpochLocked(Job* job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::WorldView ViewLocked(const Job& job) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Log(const std::string& job_id, const Job& job,
           const std::string& what) const;

  const MembershipOptions options_;
  mutable absl::Mutex mu_;
  absl::CondVar changed_;  // an epoch changed or was formed
  std::map<std::string, Job> jobs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_MEMBERSHIP_MEMBERSHIP_H_
