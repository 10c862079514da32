// Protobuf wire format of the two bulk messages of the data plane,
// GatherChunk and PushGradientsRequest, encoded and decoded by hand so that
// the payload (`bytes data`) moves between gRPC slices and the caller's
// memory with no intermediate std::string. The bytes are exactly what
// protobuf itself writes (fields in number order, zero scalars and empty
// bytes omitted), so proto/zeroshard.proto stays the contract and peers
// using the generated classes interoperate; wire_test checks this against
// SerializeAsString.
//
// Encoding (sender): the message is [prefix][payload], where the prefix is
// every field before `data` plus data's tag and length; the payload can
// then be sent as its own slice (pointing into the caller's memory or a
// buffer the payload was produced in).
//
// Decoding (receiver): ParseGatherChunk / ParsePushRequest walk a message
// held in slices without flattening it and report where the payload lies
// (a list of contiguous pieces, pointing into the message's slices). The
// pieces are valid while the WireMessage lives. Malformed input (truncated
// or over-long varints, lengths past the end, invalid wire types, field
// number 0, a repeated `data` field) is INVALID_ARGUMENT; unknown fields
// are skipped, as protobuf does.
//
// All functions are pure (no I/O) and thread-compatible.
#ifndef ZEROSHARD_PROTO_WIRE_H_
#define ZEROSHARD_PROTO_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "proto/zeroshard.pb.h"

namespace zeroshard {
namespace wire {

// Longest prefix EncodeGatherChunkPrefix writes: three tags and three
// varints.
inline constexpr size_t kMaxGatherPrefixBytes = 3 * (1 + 10);

// Writes the bytes of GatherChunk{step, offset, data of `data_bytes` bytes}
// that precede the data into `out` (room for kMaxGatherPrefixBytes) and
// returns their count; the serialized message is these bytes followed by
// the data.
size_t EncodeGatherChunkPrefix(uint64_t step, uint64_t offset,
                               uint64_t data_bytes, char* out);

// The bytes of PushGradientsRequest{header (if not null), data of
// `data_bytes` bytes} that precede the data.
std::string EncodePushRequestPrefix(const v1::PushHeader* header,
                                    uint64_t data_bytes);

// A received message, held as references to its slices (no copy).
class WireMessage {
 public:
  // An empty message (0 bytes).
  WireMessage() = default;
  // Takes references to `buffer`'s slices; `buffer` may then be reused.
  explicit WireMessage(const grpc::ByteBuffer& buffer);
  // One contiguous piece of bytes that must outlive this object (tests).
  explicit WireMessage(absl::string_view bytes);

  size_t size() const { return size_; }

 private:
  friend class Reader;
  std::vector<grpc::Slice> slices_;
  absl::InlinedVector<absl::string_view, 1> pieces_;  // non-empty, in order
  size_t size_ = 0;
};

// Where a length-delimited field's bytes lie within a WireMessage:
// contiguous pieces in order. Valid while the message lives.
struct Bytes {
  absl::InlinedVector<absl::string_view, 8> pieces;
  size_t size = 0;
  bool present = false;

  void Clear() {
    pieces.clear();
    size = 0;
    present = false;
  }
  // Copies the bytes to `out` (room for `size`).
  void CopyTo(char* out) const;
  std::string ToString() const;
};

struct GatherChunkView {
  uint64_t step = 0;
  uint64_t offset = 0;
  Bytes data;
  uint64_t shared_bytes = 0;  // written to the request's shared segment
};

struct PushRequestView {
  Bytes header;  // the serialized PushHeader (present: the field was sent)
  Bytes data;
  Bytes shared;  // the serialized SharedRef
};

absl::Status ParseGatherChunk(const WireMessage& message, GatherChunkView* out);
absl::Status ParsePushRequest(const WireMessage& message, PushRequestView* out);

}  // namespace wire
}  // namespace zeroshard

#endif  // ZEROSHARD_PROTO_WIRE_H_
