// UcxTransport: the Transport of HostCommunicator over UCX's tag API (UCX
// picks shared memory between processes of one machine, TCP across
// machines; UCX_TLS and the other UCX_* variables apply as usual).
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

// Blocks in bootstrap.AllGather (until every rank joined or it timed out).
absl::StatusOr<std::unique_ptr<Transport>> CreateUcxTransport(
    Bootstrap& bootstrap);

}  // namespace collective
}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_COLLECTIVE_UCX_TRANSPORT_H_
