// Protobuf wire-format helpers for the zero-extra-copy data-plane
// experiments (raw_client.h, variant_server.cc): the bulk `bytes data`
// fields of GatherChunk and PushGradientsRequest are read straight out of,
// or written straight into, gRPC slices, while the small fields still go
// through the generated protobuf classes. The bytes on the wire are the
// same as the stock code's, so stock and raw peers interoperate.
#ifndef ZEROSHARD_TESTS_BENCH_RAW_WIRE_H_
#define ZEROSHARD_TESTS_BENCH_RAW_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace zeroshard {
namespace bench {

// Wire types (the low 3 bits of a field tag).
inline constexpr uint32_t kWireVarint = 0;
inline constexpr uint32_t kWireLengthDelimited = 2;
inline constexpr uint32_t kWireFixed64 = 1;
inline constexpr uint32_t kWireFixed32 = 5;

void PutVarint(std::string* out, uint64_t v);
// Writes a varint at `p`, returns the byte count (<= 10).
size_t PutVarint(uint8_t* p, uint64_t v);

// Reads a message held in a ByteBuffer slice by slice, without flattening.
class SliceReader {
 public:
  explicit SliceReader(const grpc::ByteBuffer& buffer);

  bool done() const { return index_ == slices_.size(); }
  size_t remaining() const { return remaining_; }
  bool ReadVarint(uint64_t* v);
  // Reads a field tag; false at the end or on malformed input.
  bool ReadTag(uint32_t* field, uint32_t* wire_type);
  // Hands the next n bytes to fn piecewise (one call per slice it spans);
  // stops and returns false when fn does or the input is short.
  bool Consume(size_t n, const std::function<bool(const uint8_t*, size_t)>& fn);
  bool ReadString(size_t n, std::string* out);
  bool Skip(size_t n);
  // Skips one field of `wire_type` whose tag was just read.
  bool SkipField(uint32_t wire_type);

 private:
  void Advance(size_t n);
  std::vector<grpc::Slice> slices_;
  size_t index_ = 0;   // current slice
  size_t offset_ = 0;  // within it
  size_t remaining_ = 0;
};

}  // namespace bench
}  // namespace zeroshard

#endif  // ZEROSHARD_TESTS_BENCH_RAW_WIRE_H_
