// A free TCP port for a rendezvous that a child process binds later (the
// MASTER_PORT that `zeroshard run` hands its ranks): taken below the
// kernel's ephemeral range, so that the ports other programs get from
// bind(port 0) and from connect() cannot land on it in the time between
// the choice and the child's bind. A port from bind(port 0) is in that
// range and, on a busy machine, was seen taken by another process's
// outgoing connection before the child bound it.
//
// Threading: thread-safe (no state). Errors: INTERNAL naming the socket
// call when no port can be bound at all.
#ifndef ZEROSHARD_COMMON_QUIET_PORT_H_
#define ZEROSHARD_COMMON_QUIET_PORT_H_

#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace zeroshard {

// The kernel's ephemeral range, [first, last], read from `text` (the
// contents of /proc/sys/net/ipv4/ip_local_port_range: two numbers);
// Linux's default (32768, 60999) when `text` does not hold two ports in
// order (pure).
std::pair<int, int> EphemeralRange(absl::string_view text);

// A port P on 127.0.0.1 such that P .. P + count - 1 could all be bound
// just now (count >= 1: torchrun's static rendezvous keeps MASTER_PORT and
// its workers meet on MASTER_PORT + 1). Tries random ports in the 10000
// below the ephemeral range (not below 1024), then bind(port 0).
absl::StatusOr<int> QuietPort(int count = 1);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_QUIET_PORT_H_
