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
// collective broken by an earlier error: FAILED_PRECONDITION, the servers'
// epoch mismatch likewise): the group re-forms as before.
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
  // A group's training: the engine, its collectives with the peers and
  // its RPCs to the servers (a dead peer shows up here in many codes).
  kGroup,
};

enum class ErrorKind { kTransient, kPermanent };

// kLocal: everything is permanent except UNAVAILABLE, DEADLINE_EXCEEDED,
// ABORTED and CANCELLED (a slow or remote file system, a stop).
// kGroup: permanent only for INVALID_ARGUMENT (bad data found while
// training, a server rejecting the request, peers disagreeing on sizes:
// a config mismatch), OUT_OF_RANGE, UNIMPLEMENTED, PERMISSION_DENIED and
// UNAUTHENTICATED; every other code is what a dead peer, a restart or a
// newer epoch produces, so transient. OK: transient (nothing to end).
ErrorKind ClassifyError(const absl::Status& status, ErrorOrigin origin);

// "permanent" or "transient", for messages.
const char* ErrorKindName(ErrorKind kind);

}  // namespace zeroshard::elastic

#endif  // ZEROSHARD_WORKER_ELASTIC_ERROR_CLASS_H_
