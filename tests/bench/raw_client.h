// RawClient: an experimental stand-in for ShardClient's data plane (Gather
// and Push only), to measure what the changes proposed for
// client/shard_client.cc would buy without editing it:
//   * spread:   pieces go round-robin over a server's channels (ShardClient
//               salts with the piece's begin offset, which is always a
//               multiple of the alignment, so with alignment 64 and 2
//               channels every piece lands on channel 0);
//   * raw:      grpc::ByteBuffer messages instead of generated protobuf
//               classes: Gather copies chunk payloads straight from the
//               received slices into the caller's buffer (1 copy instead of
//               2: slices -> std::string -> out) and Push sends the caller's
//               memory as a static slice (0 copies instead of 2: data ->
//               std::string -> serialized slice);
//   * channel_args: extra gRPC channel arguments (window, frame size,
//               read chunk sizes).
// Same wire bytes as ShardClient, so it talks to the stock server. No
// retries: an experiment, not a client.
#ifndef ZEROSHARD_TESTS_BENCH_RAW_CLIENT_H_
#define ZEROSHARD_TESTS_BENCH_RAW_CLIENT_H_

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/shard_client.h"
#include "common/partition.h"
#include "grpcpp/grpcpp.h"
#include "proto/zeroshard.pb.h"

namespace zeroshard {
namespace bench {

struct RawClientOptions {
  std::vector<std::string> addresses;
  int channels_per_server = 2;
  uint64_t max_piece_bytes = 64ull << 20;
  bool spread = true;  // round-robin pieces over channels (else: by begin)
  bool raw = true;     // ByteBuffer data path (else: generated stubs)
  std::vector<std::pair<std::string, int>> channel_args;
  std::chrono::milliseconds deadline{60000};
};

class RawClient {
 public:
  static absl::StatusOr<std::unique_ptr<RawClient>> Connect(
      RawClientOptions options, const PartitionPlan& plan, std::string job_id);

  absl::Status Gather(const Range& r, v1::DType dtype, void* out,
                      uint64_t* step);
  absl::Status Push(const Range& r, v1::DType dtype, const void* data,
                    const PushId& id);

 private:
  RawClient(RawClientOptions options, const PartitionPlan& plan,
            std::string job_id)
      : options_(std::move(options)), plan_(plan), job_id_(std::move(job_id)) {}
  std::vector<ShardPiece> Pieces(const Range& r, size_t esize) const;
  const std::shared_ptr<grpc::Channel>& Channel(const ShardPiece& p,
                                                size_t index) const;
  absl::Status GatherPieceRaw(const ShardPiece& p, v1::DType dtype,
                              const std::shared_ptr<grpc::Channel>& channel,
                              char* out, uint64_t* step) const;
  absl::Status GatherPieceProto(const ShardPiece& p, v1::DType dtype,
                                const std::shared_ptr<grpc::Channel>& channel,
                                char* out, uint64_t* step) const;
  absl::Status PushPieceRaw(const ShardPiece& p, v1::DType dtype,
                            const std::shared_ptr<grpc::Channel>& channel,
                            const char* data, const PushId& id) const;
  absl::Status PushPieceProto(const ShardPiece& p, v1::DType dtype,
                              const std::shared_ptr<grpc::Channel>& channel,
                              const char* data, const PushId& id) const;

  const RawClientOptions options_;
  const PartitionPlan plan_;
  const std::string job_id_;
  std::vector<std::vector<std::shared_ptr<grpc::Channel>>> channels_;
};

}  // namespace bench
}  // namespace zeroshard

#endif  // ZEROSHARD_TESTS_BENCH_RAW_CLIENT_H_
