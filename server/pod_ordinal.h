// The ordinal of a StatefulSet pod from its host name: Kubernetes names the
// pods of StatefulSet "zeroshard-server" zeroshard-server-0,
// zeroshard-server-1, ..., and sets each pod's host name to its name, so a
// shard server can take its shard index from it
// (zeroshard-server --shard_index_from_hostname).
#ifndef ZEROSHARD_SERVER_POD_ORDINAL_H_
#define ZEROSHARD_SERVER_POD_ORDINAL_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace zeroshard {

// The decimal number after the last '-' of `hostname` (a FQDN is cut at its
// first '.'). INVALID_ARGUMENT naming the host name when there is none, it
// has a leading zero (other than "0" itself) or exceeds 2^31 - 1.
absl::StatusOr<uint32_t> PodOrdinal(absl::string_view hostname);

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_POD_ORDINAL_H_
