// UcxTransport: the Transport of HostCommunicator over UCX's tag API (UCX
// picks the transports and devices — with Debian's UCX 1.13, TCP; a job on
// one machine is kept on the loopback device, UcxTransportOptions; UCX_TLS
// and the other UCX_* variables apply as usual).
//
// Create() makes a UCX context and worker, swaps worker addresses (plus
// host and pid, for error messages) through the Bootstrap, and creates an
// endpoint to every peer with peer-failure detection: a peer that dies
// makes PeerStatus() report UNAVAILABLE "rank 3 (host pid 1234): <UCX
// status>", which fails the pending operation.
//
// Threading: Create() and the destructor on one thread, everything else on
// the owner's progress thread (the worker is UCS_THREAD_MODE_SERIALIZED);
// Wake() from any thread (an eventfd beside UCX's own).
#ifndef ZEROSHARD_WORKER_COLLECTIVE_UCX_TRANSPORT_H_
#define ZEROSHARD_WORKER_COLLECTIVE_UCX_TRANSPORT_H_

#include <memory>

#include "absl/status/statusor.h"
#include "worker/collective/bootstrap.h"
#include "worker/collective/transport.h"

namespace zeroshard {
namespace collective {

struct UcxTransportOptions {
  // Every rank runs on this machine (the rendezvous is a loopback address):
  // UCX uses the loopback device only (UCX_NET_DEVICES=lo, unless the
  // environment sets UCX_NET_DEVICES). Otherwise UCX prefers any other
  // interface present when the worker starts — a container network's
  // bridge, a test's veth — and when that interface goes away the ranks'
  // connection over it stalls: operations hang until op_timeout or fail
  // with "Endpoint timeout" (seen when container tests ran beside a job).
  bool loopback_only = false;
};

// Blocks in bootstrap.AllGather (until every rank joined or it timed out).
absl::StatusOr<std::unique_ptr<Transport>> CreateUcxTransport(
    Bootstrap& bootstrap, const UcxTransportOptions& options = {});

}  // namespace collective
}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_COLLECTIVE_UCX_TRANSPORT_H_
