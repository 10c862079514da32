// The raw-TCP reference for the transfer benchmarks: what plain send/recv
// of 1 MiB buffers achieves over loopback on this machine, measured the way
// the gRPC data plane is measured.
//
// TcpPump forks `pairs` peer processes (stand-ins for shard servers) that
// each hold one loopback connection to this process. A "gather" moves
// `bytes` in total from the peers into a caller buffer in this process
// (bytes / pairs per connection, concurrently); a "push" moves them from a
// caller buffer to the peers, and ends when every peer has acknowledged
// receiving its share (like PushGradients ends with the server's answer).
//
// Start() forks: call it before anything starts threads (in particular
// before the first gRPC call) and keep the object alive while measuring.
#ifndef ZEROSHARD_TESTS_BENCH_TCP_PUMP_H_
#define ZEROSHARD_TESTS_BENCH_TCP_PUMP_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"

namespace zeroshard {
namespace bench {

// Bytes per send()/recv() call on both ends.
inline constexpr size_t kTcpIoBytes = 1 << 20;

class TcpPump {
 public:
  // Forks `pairs` peers, each ready to move up to bytes / pairs (rounded
  // up) per operation.
  static absl::StatusOr<std::unique_ptr<TcpPump>> Start(int pairs,
                                                        uint64_t bytes);
  ~TcpPump();  // tells the peers to exit and reaps them

  int pairs() const { return static_cast<int>(fds_.size()); }
  // The peer processes (for CPU accounting).
  const std::vector<pid_t>& peer_pids() const { return pids_; }

  // Receives `bytes` (<= the Start size) from the peers into `out`; returns
  // the seconds it took.
  absl::StatusOr<double> Gather(char* out, uint64_t bytes);
  // Sends `bytes` from `data` to the peers and waits for every
  // acknowledgement; returns the seconds it took.
  absl::StatusOr<double> Push(const char* data, uint64_t bytes);

 private:
  TcpPump() = default;
  // Share of connection i of an operation over `bytes`: [begin, end).
  void Share(uint64_t bytes, int i, uint64_t* begin, uint64_t* end) const;

  uint64_t capacity_ = 0;
  std::vector<int> fds_;
  std::vector<pid_t> pids_;
};

}  // namespace bench
}  // namespace zeroshard

#endif  // ZEROSHARD_TESTS_BENCH_TCP_PUMP_H_
