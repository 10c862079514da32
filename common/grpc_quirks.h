// What the gRPC this project links (Debian's 1.51) needs from a process
// before its first channel connects.
//
// gRPC 1.51's TCP connect (src/core/lib/iomgr/tcp_client_posix.cc) calls
// connect(), then creates its fd object (which takes locks), and only then
// reads errno to see whether the connect is in progress. Abseil reads the
// CPU's nominal frequency lazily, the first time a thread of the process
// queues behind another on an absl::Mutex, from
// /sys/devices/system/cpu/cpu0/tsc_freq_khz; where that file is absent
// (most VMs and containers) the open leaves errno = ENOENT. When that first
// queueing falls between the two, in the connecting thread, gRPC declares a
// connect that was in progress failed: "failed to connect to all addresses;
// last error: UNKNOWN: ipv4:127.0.0.1:PORT: No such file or directory". Two
// clients connecting at once in one process (the C API's ranks as threads) hit
// it about once in a hundred starts on a loaded machine.
//
// PrepareForGrpcClients reads the frequency once, so that no later lock
// touches errno. Idempotent and thread-safe; ShardClient::Connect and
// CheckHealth (fleet/local_fleet.h) call it before they create channels, and
// any other code that creates channels should too.
#ifndef ZEROSHARD_COMMON_GRPC_QUIRKS_H_
#define ZEROSHARD_COMMON_GRPC_QUIRKS_H_

namespace zeroshard {

void PrepareForGrpcClients();

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_GRPC_QUIRKS_H_
