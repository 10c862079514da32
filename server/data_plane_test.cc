// The raw Gather/PushGradients handlers against bytes no protobuf encoder
// would send: every malformed request is INVALID_ARGUMENT, counted as
// rejected, changes nothing, and the server keeps serving. An in-process
// server; requests go out as raw byte buffers.
#include "server/data_plane.h"

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/model_spec.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/zeroshard.grpc.pb.h"
#include "server/shard_service.h"
#include "server/store/shard_store.h"

namespace zeroshard {
namespace {

constexpr char kGather[] = "/zeroshard.v1.ShardService/Gather";
constexpr char kPush[] = "/zeroshard.v1.ShardService/PushGradients";
constexpr uint64_t kElements = 2 << 20;  // 8 MiB of fp32

grpc::ByteBuffer Bytes(const std::string& s) {
  grpc::Slice slice(s);
  return grpc::ByteBuffer(&slice, 1);
}

class DataPlaneTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::ShardService::NewStub(channel_);
    v1::RegisterModelRequest req;
    v1::ModelSpec* spec = req.mutable_spec();
    spec->set_job_id("raw");
    v1::TensorSpec* t = spec->add_tensors();
    t->set_name("w");
    t->add_shape(kElements);
    *spec->add_param_groups() = DefaultParamGroup(0.0);
    spec->set_num_servers(1);
    spec->set_alignment(64);
    spec->set_serving_dtype(v1::DTYPE_BF16);
    spec->set_contributions_per_step(1);
    v1::RegisterModelResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->RegisterModel(&ctx, req, &resp).ok());
  }
  void TearDown() override { server_->Shutdown(); }

  // A gather whose request is `request` (raw bytes); returns its status and
  // the number of chunks received.
  grpc::Status RawGather(const std::string& request, int* chunks) {
    grpc::ClientContext ctx;
    const grpc::internal::RpcMethod method(
        kGather, grpc::internal::RpcMethod::SERVER_STREAMING, channel_);
    std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
        grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
            channel_.get(), method, &ctx, Bytes(request)));
    grpc::ByteBuffer chunk;
    *chunks = 0;
    while (reader->Read(&chunk)) ++*chunks;
    return reader->Finish();
  }

  // A push stream of raw messages.
  grpc::Status RawPush(const std::vector<std::string>& messages,
                       v1::PushGradientsResponse* resp) {
    grpc::ClientContext ctx;
    const grpc::internal::RpcMethod method(
        kPush, grpc::internal::RpcMethod::CLIENT_STREAMING, channel_);
    std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
        grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(
            channel_.get(), method, &ctx, resp));
    for (const std::string& m : messages) {
      if (!writer->Write(Bytes(m))) break;
    }
    writer->WritesDone();
    return writer->Finish();
  }

  std::string Header(uint64_t length, const std::string& key,
                     v1::DType dtype = v1::DTYPE_FP32) {
    v1::PushGradientsRequest msg;
    v1::PushHeader* h = msg.mutable_header();
    h->set_job_id("raw");
    h->set_offset(0);
    h->set_length(length);
    h->set_dtype(dtype);
    h->set_idempotency_key(key);
    return msg.SerializeAsString();
  }

  static std::string Data(const std::string& bytes) {
    v1::PushGradientsRequest msg;
    msg.set_data(bytes);
    return msg.SerializeAsString();
  }
  static std::string Data(uint64_t n) { return Data(std::string(n * 4, 0)); }

  StoreStats Stats() { return store_.Stats(); }

  ShardStore store_{StoreOptions()};
  ShardServiceImpl service_{&store_};
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ShardService::Stub> stub_;
};

TEST_F(DataPlaneTest, MalformedGatherRequestIsInvalidArgument) {
  for (const std::string& bad :
       {std::string("\x08", 1), std::string("\x12\x7f", 2),
        std::string("\x0b", 1), std::string(16, '\xff')}) {
    const uint64_t rejected = Stats().requests_rejected;
    int chunks = -1;
    const grpc::Status s = RawGather(bad, &chunks);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << s.error_message();
    EXPECT_EQ(chunks, 0);
    EXPECT_EQ(Stats().requests_rejected, rejected + 1);
  }
  // A well-formed request still works.
  v1::GatherRequest req;
  req.set_job_id("raw");
  req.set_length(4096);
  req.set_dtype(v1::DTYPE_FP32);
  int chunks = 0;
  EXPECT_TRUE(RawGather(req.SerializeAsString(), &chunks).ok());
  EXPECT_EQ(chunks, 1);
}

// GatherRequest.more: the ranges stream in order on one stream, each chunk
// inside one range (a range over 1 MiB in several); a bad range anywhere
// (past the end, empty), or `more` with shared memory, is INVALID_ARGUMENT
// before any chunk.
TEST_F(DataPlaneTest, MoreRangesStreamInOrder) {
  std::vector<float> values(kElements);
  for (uint64_t i = 0; i < kElements; ++i) values[i] = static_cast<float>(i);
  v1::WriteHeader w;
  w.set_job_id("raw");
  w.set_offset(0);
  w.set_length(kElements);
  w.set_dtype(v1::DTYPE_FP32);
  std::vector<std::string> data;
  for (uint64_t i = 0; i < kElements; i += 1 << 18) {
    data.emplace_back(reinterpret_cast<const char*>(values.data() + i),
                      4u << 18);
  }
  ASSERT_TRUE(store_.WriteParameters(w, data).ok());
  const std::vector<std::pair<uint64_t, uint64_t>> ranges = {
      {100, 10}, {5000, 3}, {64, 300000}, {kElements - 1, 1}};
  v1::GatherRequest req;
  req.set_job_id("raw");
  req.set_offset(ranges[0].first);
  req.set_length(ranges[0].second);
  req.set_dtype(v1::DTYPE_FP32);
  for (size_t i = 1; i < ranges.size(); ++i) {
    v1::GatherRange* m = req.add_more();
    m->set_offset(ranges[i].first);
    m->set_length(ranges[i].second);
  }
  grpc::ClientContext ctx;
  const grpc::internal::RpcMethod method(
      kGather, grpc::internal::RpcMethod::SERVER_STREAMING, channel_);
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
          channel_.get(), method, &ctx, Bytes(req.SerializeAsString())));
  std::vector<std::pair<uint64_t, uint64_t>> got;  // (offset, elements)
  grpc::ByteBuffer message;
  while (reader->Read(&message)) {
    grpc::Slice flat;
    ASSERT_TRUE(message.DumpToSingleSlice(&flat).ok());
    v1::GatherChunk chunk;
    ASSERT_TRUE(
        chunk.ParseFromArray(flat.begin(), static_cast<int>(flat.size())));
    const uint64_t n = chunk.data().size() / 4;
    for (uint64_t i = 0; i < n; ++i) {
      float v;
      std::memcpy(&v, chunk.data().data() + 4 * i, 4);
      ASSERT_EQ(v, static_cast<float>(chunk.offset() + i)) << chunk.offset();
    }
    if (!got.empty() &&
        got.back().first + got.back().second == chunk.offset()) {
      got.back().second += n;  // the next chunk of the same range
    } else {
      got.push_back({chunk.offset(), n});
    }
  }
  const grpc::Status st = reader->Finish();
  ASSERT_TRUE(st.ok()) << st.error_message();
  const std::vector<std::pair<uint64_t, uint64_t>> want = {
      {100, 10}, {5000, 3}, {64, 300000}, {kElements - 1, 1}};
  EXPECT_EQ(got, want);

  for (int how : {0, 1, 2}) {
    v1::GatherRequest bad = req;
    if (how == 0) bad.mutable_more(1)->set_length(kElements);  // past the end
    if (how == 1) bad.mutable_more(2)->set_length(0);          // empty
    if (how == 2) bad.mutable_shared()->set_pid(1);
    const uint64_t rejected = Stats().requests_rejected;
    int chunks = -1;
    const grpc::Status s = RawGather(bad.SerializeAsString(), &chunks);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << s.error_message();
    EXPECT_EQ(chunks, 0);
    EXPECT_EQ(Stats().requests_rejected, rejected + 1);
  }
}

TEST_F(DataPlaneTest, MalformedPushIsInvalidArgumentAndAppliesNothing) {
  const std::vector<std::vector<std::string>> bad = {
      {std::string("\x0a\x05"
                   "ab",
                   4)},                      // header past the end
      {std::string("\x0a\x02\xff\xff", 4)},  // header bytes not a header
      {std::string("\x0b", 1)},              // group wire type
      {Header(64, "k1"), std::string("\x12\x80", 2)},  // truncated length
      {Header(64, "k2"), std::string("\x12\x01x\x12\x01y", 6)},  // data twice
      {Header(64, "k3"), Header(64, "k3")},  // a second header
      {Data(64)},                            // no header
      {},                                    // nothing at all
  };
  for (const auto& messages : bad) {
    const StoreStats before = Stats();
    v1::PushGradientsResponse resp;
    const grpc::Status s = RawPush(messages, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << s.error_message();
    const StoreStats after = Stats();
    EXPECT_EQ(after.requests_rejected, before.requests_rejected + 1);
    EXPECT_EQ(after.contributions_applied, before.contributions_applied);
    EXPECT_EQ(after.elements_applied, before.elements_applied);
  }
  // The range was released each time: a good push of it is accepted.
  v1::PushGradientsResponse resp;
  ASSERT_TRUE(RawPush({Header(64, "good"), Data(64)}, &resp).ok());
  EXPECT_EQ(resp.elements_received(), 64u);
  EXPECT_EQ(Stats().contributions_applied, 1u);
}

// Large bf16 chunks arrive in many slices, with elements straddling slice
// boundaries and slices at odd addresses: every element must still land in
// place (checked through the server's sum of squares).
TEST_F(DataPlaneTest, LargeBf16PushArrivesIntact) {
  std::string bytes(kElements * 2, 0);
  double expected = 0;
  for (uint64_t i = 0; i < kElements; ++i) {
    // Distinct finite bf16 values; as fp32 their bits are bits << 16.
    const uint16_t bits =
        static_cast<uint16_t>(0x3C00 + (i * 2654435761u) % 0x0700);
    bytes[2 * i] = static_cast<char>(bits & 0xFF);
    bytes[2 * i + 1] = static_cast<char>(bits >> 8);
    const uint32_t f32 = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &f32, 4);
    expected += static_cast<double>(f) * f;
  }
  std::vector<std::string> messages = {
      Header(kElements, "bf16", v1::DTYPE_BF16)};
  for (uint64_t at = 0; at < bytes.size(); at += kMaxChunkBytes) {
    messages.push_back(Data(bytes.substr(at, kMaxChunkBytes)));
  }
  v1::PushGradientsResponse resp;
  ASSERT_TRUE(RawPush(messages, &resp).ok());
  v1::PrepareStepRequest req;
  req.set_job_id("raw");
  v1::PrepareStepResponse prep;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->PrepareStep(&ctx, req, &prep).ok());
  ASSERT_TRUE(prep.complete());
  EXPECT_NEAR(prep.sum_squares(), expected, 1e-9 * expected);
}

}  // namespace
}  // namespace zeroshard
