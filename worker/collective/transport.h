// Point-to-point messaging under HostCommunicator: tagged sends and receives
// between the ranks of a fixed group, completed asynchronously.
//
// A message is matched by (source rank, destination rank, tag); the tag is
// chosen by the caller and each tag is used by at most one message between
// a pair. Messages may arrive before the receive is posted (the transport
// holds them).
//
// Threading: everything except Wake() is called by one thread, the owner's
// progress thread. Completion objects are written by that thread only.
// Ownership: the data pointer of a posted transfer and the Completion must
// stay valid until the Completion is done (or Abort() returned).
#ifndef ZEROSHARD_WORKER_COLLECTIVE_TRANSPORT_H_
#define ZEROSHARD_WORKER_COLLECTIVE_TRANSPORT_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace zeroshard {
namespace collective {

struct Completion {
  bool done = false;
  absl::Status status;  // of a done transfer
  size_t bytes = 0;     // bytes received (receives)
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "rank 3" plus where it is, for error messages.
  virtual std::string PeerName(int peer) const = 0;

  // Posts a send of `bytes` bytes to `peer`.
  virtual void Send(int peer, uint64_t tag, const void* data, size_t bytes,
                    Completion* done) = 0;
  // Posts a receive of at most `bytes` bytes from `peer`. A longer message
  // completes it with an error (truncated); a shorter one with its length.
  virtual void Recv(int peer, uint64_t tag, void* data, size_t bytes,
                    Completion* done) = 0;
  // Advances transfers; returns true if anything happened.
  virtual bool Progress() = 0;
  // Blocks until something may have happened, Wake() was called, or
  // `timeout` passed.
  virtual void WaitForEvent(absl::Duration timeout) = 0;
  // Makes a concurrent or the next WaitForEvent return. Any thread.
  virtual void Wake() = 0;
  // OK, or UNAVAILABLE naming the peer once it is known to be gone.
  virtual absl::Status PeerStatus(int peer) = 0;
  // Ends every outstanding transfer (completing it with an error) and
  // returns once none refers to caller memory. Unusable afterwards.
  virtual void Abort() = 0;
};

}  // namespace collective
}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_COLLECTIVE_TRANSPORT_H_
