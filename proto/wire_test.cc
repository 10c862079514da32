// The hand-written encoders produce exactly protobuf's serialization, and
// the decoders read protobuf's serialization back however it is split into
// slices; malformed bytes are INVALID_ARGUMENT, never a crash.
#include "proto/wire.h"

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "proto/zeroshard.pb.h"

namespace zeroshard::wire {
namespace {

const uint64_t kValues[] = {0,          1,     127,      128,
                            16383,      16384, 1u << 20, (1ull << 32) + 5,
                            1ull << 63, ~0ull};

std::string Payload(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(i * 7 + 3);
  return s;
}

// `bytes` as a ByteBuffer of slices cut at random places (some empty).
grpc::ByteBuffer Split(const std::string& bytes, std::mt19937_64* rng) {
  std::vector<grpc::Slice> slices;
  size_t at = 0;
  while (at < bytes.size()) {
    const size_t n = std::min<size_t>(
        bytes.size() - at, (*rng)() % 7 == 0 ? 0 : 1 + (*rng)() % 40);
    slices.emplace_back(bytes.data() + at, n);
    at += n;
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

TEST(WireTest, GatherChunkPrefixIsProtobufsSerialization) {
  for (uint64_t step : kValues) {
    for (uint64_t offset : kValues) {
      for (size_t n : {0, 1, 2, 127, 128, 4096, 1 << 20}) {
        v1::GatherChunk chunk;
        chunk.set_step(step);
        chunk.set_offset(offset);
        chunk.set_data(Payload(n));
        char prefix[kMaxGatherPrefixBytes];
        const size_t k = EncodeGatherChunkPrefix(step, offset, n, prefix);
        ASSERT_EQ(std::string(prefix, k) + chunk.data(),
                  chunk.SerializeAsString())
            << step << " " << offset << " " << n;
      }
    }
  }
}

TEST(WireTest, PushRequestPrefixIsProtobufsSerialization) {
  v1::PushHeader h;
  h.set_job_id("job");
  h.set_epoch(3);
  h.set_step(1ull << 40);
  h.set_slot(2);
  h.set_offset(64);
  h.set_length(1 << 20);
  h.set_dtype(v1::DTYPE_BF16);
  h.set_idempotency_key(std::string(300, 'k'));  // a 2-byte length
  for (const bool with_header : {false, true}) {
    for (size_t n : {0, 1, 127, 128, 1 << 20}) {
      v1::PushGradientsRequest msg;
      if (with_header) *msg.mutable_header() = h;
      msg.set_data(Payload(n));
      ASSERT_EQ(
          EncodePushRequestPrefix(with_header ? &h : nullptr, n) + msg.data(),
          msg.SerializeAsString())
          << with_header << " " << n;
    }
  }
  // An empty header is still present on the wire.
  v1::PushGradientsRequest msg;
  msg.mutable_header();
  const v1::PushHeader empty;
  EXPECT_EQ(EncodePushRequestPrefix(&empty, 0), msg.SerializeAsString());
}

TEST(WireTest, ParsesProtobufsBytesAcrossAnySlices) {
  std::mt19937_64 rng(1);
  for (int round = 0; round < 200; ++round) {
    v1::GatherChunk chunk;
    chunk.set_step(kValues[rng() % 10]);
    chunk.set_offset(kValues[rng() % 10]);
    chunk.set_data(Payload(rng() % 3000));
    if (round % 3 == 0) chunk.set_shared_bytes(kValues[rng() % 10]);
    const grpc::ByteBuffer buffer = Split(chunk.SerializeAsString(), &rng);
    const WireMessage m(buffer);
    GatherChunkView view;
    ASSERT_TRUE(ParseGatherChunk(m, &view).ok());
    EXPECT_EQ(view.step, chunk.step());
    EXPECT_EQ(view.offset, chunk.offset());
    EXPECT_EQ(view.data.size, chunk.data().size());
    EXPECT_EQ(view.data.ToString(), chunk.data());
    EXPECT_EQ(view.shared_bytes, chunk.shared_bytes());

    v1::PushGradientsRequest req;
    if (round % 2 == 0) {
      req.mutable_header()->set_job_id("j");
      req.mutable_header()->set_length(rng());
    }
    req.set_data(Payload(rng() % 3000));
    if (round % 3 == 0) {
      req.mutable_shared()->set_pid(rng() % 100000);
      req.mutable_shared()->set_token(Payload(16));
      req.mutable_shared()->set_offset(64);
    }
    const grpc::ByteBuffer pbuf = Split(req.SerializeAsString(), &rng);
    const WireMessage pm(pbuf);
    PushRequestView pview;
    ASSERT_TRUE(ParsePushRequest(pm, &pview).ok());
    EXPECT_EQ(pview.header.present, req.has_header());
    v1::PushHeader parsed;
    ASSERT_TRUE(parsed.ParseFromString(pview.header.ToString()));
    EXPECT_EQ(parsed.SerializeAsString(), req.header().SerializeAsString());
    EXPECT_EQ(pview.data.ToString(), req.data());
    EXPECT_EQ(pview.shared.present, req.has_shared());
    EXPECT_EQ(pview.shared.ToString(),
              req.has_shared() ? req.shared().SerializeAsString() : "");
  }
}

TEST(WireTest, SkipsUnknownFields) {
  // Field 9 of every wire type, then a known field.
  const std::string bytes = std::string("\x48\x05", 2) +  // varint
                            std::string("\x49", 1) + std::string(8, 'a') +
                            std::string("\x4a\x02xy", 4) +  // bytes
                            std::string("\x4d", 1) + std::string(4, 'b') +
                            std::string("\x08\x07", 2);  // step 7
  GatherChunkView view;
  ASSERT_TRUE(ParseGatherChunk(WireMessage(bytes), &view).ok());
  EXPECT_EQ(view.step, 7u);
  EXPECT_FALSE(view.data.present);
}

TEST(WireTest, MalformedBytesAreInvalidArgument) {
  const std::vector<std::string> bad = {
      std::string("\x08", 1),                         // truncated varint
      std::string("\x08\x80\x80", 3),                 // unterminated varint
      std::string("\x08") + std::string(10, '\xff'),  // > 64 bits
      std::string("\x1a\x05"
                  "abc",
                  5),                              // length past the end
      std::string("\x1a\xff\xff\xff\xff\x0f", 6),  // huge length
      std::string("\x00\x01", 2),                  // field number 0
      std::string("\x0b", 1),                      // group (wire type 3)
      std::string("\x0e\x00", 2),                  // wire type 6
      std::string("\x1a\x01x\x1a\x01y", 6),        // data twice
  };
  for (const std::string& b : bad) {
    GatherChunkView view;
    const absl::Status s = ParseGatherChunk(WireMessage(b), &view);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << b.size();
    PushRequestView pview;
    const std::string p = b.size() == 6 && b[0] == '\x1a'
                              ? std::string("\x12\x01x\x12\x01y", 6)
                              : b;
    EXPECT_EQ(ParsePushRequest(WireMessage(p), &pview).code(),
              absl::StatusCode::kInvalidArgument)
        << p.size();
  }
  // Every truncation of a valid message fails cleanly or parses a prefix.
  v1::PushGradientsRequest req;
  req.mutable_header()->set_job_id("job");
  req.set_data(Payload(300));
  const std::string full = req.SerializeAsString();
  for (size_t n = 0; n < full.size(); ++n) {
    PushRequestView view;
    const absl::Status s =
        ParsePushRequest(WireMessage(full.substr(0, n)), &view);
    EXPECT_TRUE(s.ok() || s.code() == absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace zeroshard::wire
