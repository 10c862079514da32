// MembershipClient: one worker's membership of a job, through the
// MembershipService of shard 0 (proto/zeroshard.proto).
//
//   MembershipClientOptions o;
//   o.job_id = "gpt2"; o.worker_name = "host:1234"; o.node = "host";
//   ZS_ASSIGN_OR_RETURN(auto m, MembershipClient::Create(client.get(), o));
//   ZS_RETURN_IF_ERROR(m->Join());      // member id, lease keeper started
//   ... every step: if (m->epoch() != world.epoch) re-form the group
//   ZS_RETURN_IF_ERROR(m->Leave());     // graceful exit: epoch + 1 at once
//   m->Leave(status.ToString());        // a permanent error: the job fails
//
// Join() gets a member id and starts the lease keeper, a thread that sends
// a Heartbeat every lease_ms/3 (lease_ms from the server's JoinResponse).
// Every answer (Join, Heartbeat, Leave, Rendezvous) updates world() and
// epoch(), the newest view seen; a Join resets them to its own answer (a
// restarted shard 0 may count epochs anew). A member that leaves with a
// failure text fails the job: world().failure() is that text in every
// member's next answer (WorldView.failure), so the others stop too.
// Groups of one epoch are formed
// with Rendezvous (worker/elastic/world.h does it for the collectives).
//
// Ownership: the ShardClient is not owned and must outlive this object;
// its Channel(0, 0) (credentials, interceptors) carries every call.
//
// Threading: all methods are thread-safe; Join() and Leave() are
// serialised. world(), epoch(), member_id() and expired() are cheap
// (epoch() and expired() are atomics, for the training loop).
//
// Errors: every call has a deadline of options.rpc_timeout (Rendezvous:
// plus its wait) and waits for the channel to be ready within it, so a
// shard 0 restarting briefly delays calls rather than failing them; the
// server's errors come back as absl statuses prefixed with the call and
// shard 0's address. NOT_FOUND from Heartbeat, Refresh or Rendezvous means
// this member is unknown or its lease expired: expired() turns true, the
// lease keeper stops, and only Join() makes this worker a member again.
// The keeper retries other failures (UNAVAILABLE while shard 0 restarts)
// at its next tick and logs them to stderr at most once every 10 s.
#ifndef ZEROSHARD_CLIENT_MEMBERSHIP_CLIENT_H_
#define ZEROSHARD_CLIENT_MEMBERSHIP_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/shard_client.h"
#include "grpcpp/client_context.h"
#include "proto/zeroshard.grpc.pb.h"

namespace zeroshard {

struct MembershipClientOptions {
  std::string job_id;
  std::string worker_name;  // stable name, e.g. host:pid or pod name
  std::string node;         // node (host) identity, for hierarchy
  uint32_t local_rank = 0;
  uint32_t local_size = 1;
  std::string address;  // where peers reach this worker, optional
  absl::Duration rpc_timeout = absl::Seconds(10);
};

class MembershipClient {
 public:
  // `client` (not owned) must outlive this; no RPC here. INVALID_ARGUMENT
  // without a client, job id or worker name.
  static absl::StatusOr<std::unique_ptr<MembershipClient>> Create(
      ShardClient* client, MembershipClientOptions options);
  // Stops the lease keeper; does not Leave (the lease then expires).
  ~MembershipClient();

  MembershipClient(const MembershipClient&) = delete;
  MembershipClient& operator=(const MembershipClient&) = delete;

  // Joins as a new member (a new member id; a current, unexpired one is
  // left first) and (re)starts the lease keeper.
  absl::Status Join();
  // Stops the lease keeper and leaves; NOT_FOUND (already gone) is OK.
  // member_id() is 0 afterwards, also after an error (the lease expires).
  // A non-empty `failure` (a permanent error's text) fails the job for
  // every member (LeaveRequest.failure); a server older than that field
  // ignores it.
  absl::Status Leave(const std::string& failure = "");

  const std::string& worker_name() const { return options_.worker_name; }
  // 0 before Join and after Leave.
  uint64_t member_id() const { return member_id_.load(); }
  // The newest view seen.
  v1::WorldView world() const;
  // Non-empty: the job failed with this text (world().failure()).
  std::string job_failure() const;
  // The newest epoch seen (world().epoch()).
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }
  // A Heartbeat (or Rendezvous) got NOT_FOUND: this member is out; Join
  // again.
  bool expired() const { return expired_.load(std::memory_order_acquire); }
  // The lease of the last Join (0 before).
  absl::Duration lease() const;

  // One Heartbeat now; updates world() and epoch(). FAILED_PRECONDITION
  // when not a member.
  absl::StatusOr<v1::WorldView> Refresh();
  // Posts `blob` for `epoch` and waits up to wait_ms (the server caps it at
  // 2000) for every member of that epoch to have posted (see
  // RendezvousRequest). Renews the lease. FAILED_PRECONDITION when not a
  // member.
  absl::StatusOr<v1::RendezvousResponse> Rendezvous(uint64_t epoch,
                                                    const std::string& blob,
                                                    uint32_t wait_ms);

 private:
  MembershipClient(ShardClient* client, MembershipClientOptions options);

  // Runs one call with deadline `timeout`; `keeper`: the lease keeper's
  // (StopKeeper cancels it).
  absl::Status Call(
      const char* what, absl::Duration timeout, bool keeper,
      const std::function<grpc::Status(grpc::ClientContext*)>& rpc);
  // Call() as the current member (FAILED_PRECONDITION when there is
  // none); NOT_FOUND marks it expired.
  absl::Status MemberCall(
      const char* what, absl::Duration timeout, bool keeper,
      const std::function<grpc::Status(grpc::ClientContext*, uint64_t)>& rpc);
  absl::StatusOr<v1::WorldView> Heartbeat(absl::Duration timeout, bool keeper);
  // Keeps `view` if it is not older than the newest seen (`reset`: always).
  void Observe(const v1::WorldView& view, bool reset = false);
  void StartKeeper() ABSL_EXCLUSIVE_LOCKS_REQUIRED(control_mu_);
  void StopKeeper() ABSL_EXCLUSIVE_LOCKS_REQUIRED(control_mu_);
  void KeepLease();  // the keeper thread

  ShardClient* const client_;
  const MembershipClientOptions options_;
  const std::string server_;  // "shard 0 (<address>)", for errors
  std::unique_ptr<v1::MembershipService::Stub> stub_;

  std::atomic<uint64_t> member_id_{0};
  std::atomic<uint64_t> epoch_{0};
  std::atomic<bool> expired_{false};

  mutable absl::Mutex world_mu_;
  v1::WorldView world_ ABSL_GUARDED_BY(world_mu_);
  absl::Duration lease_ ABSL_GUARDED_BY(world_mu_) = absl::ZeroDuration();

  absl::Mutex control_mu_;  // serialises Join, Leave, the destructor
  std::thread keeper_ ABSL_GUARDED_BY(control_mu_);

  absl::Mutex keeper_mu_;
  bool stop_ ABSL_GUARDED_BY(keeper_mu_) = false;
  grpc::ClientContext* keeper_call_ ABSL_GUARDED_BY(keeper_mu_) = nullptr;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_MEMBERSHIP_CLIENT_H_
