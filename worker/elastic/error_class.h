// Which errors of an elastic worker end the job and which re-form the
// group (issue 23 item 14): one pure function, no state, no I/O.
//
// Permanent: retrying cannot help — bad data (a token id >= the
// vocabulary), a bad config or flag, a model that does not match the
// servers' or the peers', a rejected credential. The worker that hits one
// fails the job through the membership (MembershipClient::Leave(failure))
// and exits nonzero; every other member stops with that message.
// Transient: a dead or silent peer, an unreachable or restarting server,
// a newer epoch (UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED, CANCELLED, a
// collective broken by an earlier error): the group re-forms as before.
//
// The same table fits the Python elastic loop (python/zeroshard/elastic.py)
// for its own RPC and data errors.
#ifndef ZEROSHARD_WORKER_ELASTIC_ERROR_CLASS_H_
#define ZEROSHARD_WORKER_ELASTIC_ERROR_CLASS_H_

#include "absl/status/status.h"

namespace zeroshard::elastic {

// Where an error came from.
enum class ErrorOrigin {
  // This worker's own setup, no peer and no server involved: its data
  // files, its config, the model it builds, its initial parameters.
  kLocal,
  // A group's training in which a collective with the peers failed (a
  // dead, silent or mismatched peer; watched_communicator.h).
  kCollective,
  // A group's training whose collectives all worked: the servers'
  // answers (RegisterModel, pushes, the step protocol) and the engine's
  // own checks.
  kGroup,
};

enum class ErrorKind { kTransient, kPermanent };

// OK, UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED, CANCELLED: transient from
// every origin. Otherwise:
//   kLocal: permanent.
//   kCollective: permanent only for INVALID_ARGUMENT (the peers disagree
//     on an operation's size: their configs differ); the rest (e.g.
//     FAILED_PRECONDITION "communicator broken by an earlier error") is
//     what a dead peer leaves behind: transient.
//   kGroup: permanent for INVALID_ARGUMENT (bad data found while
//     training, a request the servers reject), FAILED_PRECONDITION (the
//     servers hold another model, or were started for another layout),
//     OUT_OF_RANGE, UNIMPLEMENTED, PERMISSION_DENIED, UNAUTHENTICATED;
//     transient for the rest (RESOURCE_EXHAUSTED: a busy server;
//     INTERNAL, UNKNOWN, DATA_LOSS, NOT_FOUND, ALREADY_EXISTS: re-formed
//     as before). The step protocol answers a server's failed Prepare or
//     Commit as ABORTED while the servers are up, so those stay transient,
//     but for RESOURCE_EXHAUSTED, PERMISSION_DENIED and DATA_LOSS (a full
//     or read-only checkpoint directory, damage).
ErrorKind ClassifyError(const absl::Status& status, ErrorOrigin origin);

// The exit code of a worker process (not elastic) whose run ended with
// `status` (not OK), for the launcher that restarts failed workers:
// kExitPermanent when a restart would meet the same error — kGroup's
// permanent codes and DATA_LOSS and RESOURCE_EXHAUSTED (every checkpoint
// damaged, NaN gradients in the data, a full disk) — else 1.
inline constexpr int kExitPermanent = 3;
int WorkerExitCode(const absl::Status& status);

// "permanent" or "transient", for messages.
const char* ErrorKindName(ErrorKind kind);

}  // namespace zeroshard::elastic

#endif  // ZEROSHARD_WORKER_ELASTIC_ERROR_CLASS_H_
