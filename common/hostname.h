// This machine's host name, for logs and names (a pod's name on Kubernetes,
// where $HOSTNAME is the pod name), and whether an address names this
// machine's loopback.
#ifndef ZEROSHARD_COMMON_HOSTNAME_H_
#define ZEROSHARD_COMMON_HOSTNAME_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace zeroshard {

// $HOSTNAME if set, else gethostname(); "" when neither gives one.
std::string LocalHostname();

// Whether `address` — "host:port", "[v6]:port", a bare host, or a gRPC
// target ("ipv4:", "ipv6:", "dns:" schemes; "unix:" sockets) — names this
// machine's loopback: 127.0.0.0/8, ::1, localhost or a unix socket (pure).
bool IsLoopbackAddress(absl::string_view address);

// The port `address` names — "host:port" or "[v6]:port", with or without
// one of the schemes above — or 0 where it names none (a bare host, a
// bare IPv6 literal, a unix socket). INVALID_ARGUMENT naming the address
// when the port is not a number in 1..65535, the host is empty, or a byte
// is a space, a control character or not ASCII (pure).
absl::StatusOr<int> AddressPort(absl::string_view address);

// A shard server's address as a client takes it: AddressPort's checks and
// a port, but for a unix socket (a server listens on the port its --port
// names; gRPC would take 443 for a bare host). INVALID_ARGUMENT naming the
// address (pure).
absl::Status CheckServerAddress(absl::string_view address);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_HOSTNAME_H_
