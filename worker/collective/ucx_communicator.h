// A HostCommunicator over UCX between real processes, configured from the
// launcher's environment. The usual entry point for CPU workers.
//
//   ZS_ASSIGN_OR_RETURN(UcxCommunicatorConfig config,
//                       UcxCommunicatorConfig::FromEnv());
//   ZS_ASSIGN_OR_RETURN(auto comm, CreateUcxCommunicator(config));
//   comm->AllReduce(grads, n, DType::kBfloat16).Wait();
//
// Environment (set by the launcher):
//   ZEROSHARD_RANK, ZEROSHARD_WORLD_SIZE   this rank, W
//   ZEROSHARD_LOCAL_RANK, ZEROSHARD_LOCAL_SIZE   place in the node (optional;
//       default 0 / 1 = flat). Ranks must be numbered node-major: rank =
//       node·local_size + local_rank.
//   ZEROSHARD_COORD                        host:port where rank 0 listens
#ifndef ZEROSHARD_WORKER_COLLECTIVE_UCX_COMMUNICATOR_H_
#define ZEROSHARD_WORKER_COLLECTIVE_UCX_COMMUNICATOR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/collective/bootstrap.h"
#include "worker/collective/host_communicator.h"
#include "worker/collective/ucx_transport.h"

namespace zeroshard {
namespace collective {

struct UcxCommunicatorConfig {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_size = 1;
  std::string coordinator;  // host:port
  uint32_t part_alignment = 1;
  absl::Duration bootstrap_timeout = absl::Seconds(60);
  absl::Duration op_timeout = absl::Minutes(5);
  // Rank 0, optional: once listening, write the rendezvous port (one line)
  // to this file, atomically (WriteFileAtomic), so that a launcher
  // can start rank 0 on coordinator port 0 and pass the port on.
  std::string port_file;

  // Reads the variables above; INVALID_ARGUMENT naming a bad or missing one.
  static absl::StatusOr<UcxCommunicatorConfig> FromEnv();
};

// Bootstraps (blocking until every rank joined, or bootstrap_timeout) and
// returns the communicator. A coordinator on a loopback address means every
// rank is on this machine: UCX then uses the loopback device only
// (UcxTransportOptions::loopback_only). INVALID_ARGUMENT for an inconsistent
// config; the Env's error (naming it) for a port_file that cannot be written.
absl::StatusOr<std::unique_ptr<HostCommunicator>> CreateUcxCommunicator(
    const UcxCommunicatorConfig& config);

// The same over a rendezvous done by `bootstrap` (its rank() and size()
// are the group's; e.g. worker/elastic's, through the membership service):
// the transport is created, `bootstrap` is used once and may then go.
absl::StatusOr<std::unique_ptr<HostCommunicator>> CreateUcxCommunicator(
    Bootstrap& bootstrap, const HostCommunicatorOptions& options,
    const UcxTransportOptions& transport_options = {});

}  // namespace collective
}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_COLLECTIVE_UCX_COMMUNICATOR_H_
