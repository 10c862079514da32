// Elastic worlds: the collective group of one membership epoch.
//
//   ZS_ASSIGN_OR_RETURN(auto m, MembershipClient::Create(client, mo));
//   ZS_RETURN_IF_ERROR(m->Join());
//   ZS_ASSIGN_OR_RETURN(World world, FormWorld(m.get(), wo));
//   ... train over world.comm; when m->epoch() != world.epoch or an
//   operation fails: wo.min_epoch = world.epoch + 1 and FormWorld again.
//
// FormWorld waits until the job's newest epoch has at least min_workers
// members and includes this member (joining again when this member expired
// or is not in the view), then every member of that epoch posts its UCX
// address through MembershipService.Rendezvous (MembershipBootstrap) and
// creates its transport once all have. When the epoch changes meanwhile (a
// member joins, leaves or expires) the rendezvous is superseded and
// FormWorld starts again with the newer view, until options.timeout.
//
// Ranks: a member's rank is its index in member-id order, so members that
// stay keep their order and newcomers come last. HostCommunicatorOptions
// .local_size must divide every size the group can take (1: flat).
//
// Errors: options.check's; CANCELLED once options.stop returns true;
// DEADLINE_EXCEEDED past options.timeout, naming the epoch and the members that
// had not posted (an incomplete Rendezvous answer does not list the posted
// addresses today, so: every member but this one) or, before a rendezvous, the
// members present; the membership client's errors other than NOT_FOUND
// (rejoin), UNAVAILABLE and DEADLINE_EXCEEDED (retried); the transport's
// errors.
//
// Threading: one FormWorld per MembershipClient at a time.
#ifndef ZEROSHARD_WORKER_ELASTIC_WORLD_H_
#define ZEROSHARD_WORKER_ELASTIC_WORLD_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/membership_client.h"
#include "proto/zeroshard.pb.h"
#include "worker/collective/host_communicator.h"
#include "worker/collective/ucx_transport.h"

namespace zeroshard {
namespace elastic {

struct WorldOptions {
  int min_workers = 1;
  absl::Duration timeout = absl::Minutes(10);
  // Form only an epoch >= min_epoch: after a world failed (a peer died
  // before its lease ran out), its epoch + 1, so that the same, formed
  // epoch is not formed again.
  uint64_t min_epoch = 0;
  collective::HostCommunicatorOptions comm;
  // The transport of every group (loopback_only: every member and server
  // is on this machine).
  collective::UcxTransportOptions transport;
  // Progress lines (waiting, formed); null: none.
  std::function<void(const std::string&)> log;
  // Null, or polled between membership calls (every poll and rendezvous
  // round, at most ~1 s apart): once true, FormWorld gives up with
  // CANCELLED (the worker is leaving the job). Called on FormWorld's
  // thread.
  std::function<bool()> stop;
  // Null, or called with every view FormWorld gets from the membership
  // (after joining or refreshing): an error ends FormWorld with it (the
  // job failed, or it is done). Called on FormWorld's thread.
  std::function<absl::Status(const v1::WorldView&)> check;
};

struct World {
  uint64_t epoch = 0;
  int rank = 0;
  int size = 0;
  v1::WorldView view;  // that epoch's members
  std::unique_ptr<collective::HostCommunicator> comm;
};

// Forms the collective group of the newest membership epoch that has at
// least min_workers members and includes this member. `m` must outlive the
// call (not the World).
absl::StatusOr<World> FormWorld(MembershipClient* m, const WorldOptions& o);

// This member's rank in `view` (its index in member-id order), or -1.
int RankOf(const v1::WorldView& view, uint64_t member_id);

}  // namespace elastic
}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_ELASTIC_WORLD_H_
