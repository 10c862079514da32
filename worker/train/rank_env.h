// Where a zeroshard-worker (without --elastic) finds its rank: the
// environment that `zeroshard train` sets, or the one torchrun, Kubeflow's
// PyTorchJob (and a JobSet that sets the same names) set.
//
//   zeroshard train        torchrun / PyTorchJob       meaning
//   ZEROSHARD_RANK         RANK                        this rank
//   ZEROSHARD_WORLD_SIZE   WORLD_SIZE                  W
//   ZEROSHARD_LOCAL_RANK   LOCAL_RANK                  place in the node
//   ZEROSHARD_LOCAL_SIZE   LOCAL_WORLD_SIZE            ranks per node
//   ZEROSHARD_COORD        MASTER_ADDR:MASTER_PORT     where rank 0 listens
//                                                      for the rendezvous
//
// Either name of a pair may be set; when both are set they must say the
// same (else INVALID_ARGUMENT naming both): there is no silent precedence.
// Local rank and size default to 0 and 1 (a flat group); the coordinator
// is needed when W > 1 (rank 0 listens there: MASTER_ADDR must be an
// address of rank 0's host, as torch.distributed also requires).
//
// torchrun's static rendezvous (--master_addr/--master_port without
// --rdzv_backend/--standalone) keeps its own store listening on
// MASTER_PORT and says so with TORCHELASTIC_USE_AGENT_STORE=True; the
// workers then meet on MASTER_PORT + 1, which must be free on that host.
//
// Threading: pure functions of the lookup they are given.
#ifndef ZEROSHARD_WORKER_TRAIN_RANK_ENV_H_
#define ZEROSHARD_WORKER_TRAIN_RANK_ENV_H_

#include <functional>

#include "absl/status/statusor.h"
#include "worker/collective/ucx_communicator.h"

namespace zeroshard::train {

// Returns the value of a variable, or null when it is not set.
using EnvLookup = std::function<const char*(const char*)>;

// rank, world_size, local_rank, local_size and coordinator from the
// variables above (the other fields keep their defaults). INVALID_ARGUMENT
// naming the variables: none of either set (the message names both sets
// and --elastic), a value that is not an integer, a pair that disagrees,
// half of a pair of its own kind (MASTER_ADDR without MASTER_PORT, a rank
// without a world size), or W > 1 without a coordinator.
absl::StatusOr<collective::UcxCommunicatorConfig> RankConfigFromEnv(
    const EnvLookup& lookup);

// The same from this process's environment (getenv).
absl::StatusOr<collective::UcxCommunicatorConfig> RankConfigFromEnv();

}  // namespace zeroshard::train

#endif  // ZEROSHARD_WORKER_TRAIN_RANK_ENV_H_
