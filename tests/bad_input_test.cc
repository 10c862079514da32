// Every malformed or out-of-place request against a real server gets the
// documented status and leaves the server's state exactly as it was; the
// server stays up and a normal step afterwards is still exact.
#include <cmath>
#include <limits>

#include "common/model_spec.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/zeroshard.grpc.pb.h"
#include "tests/testing.h"

namespace zeroshard {
namespace {

class BadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fleet_ = testing::StartFleet(2);
    ASSERT_NE(fleet_, nullptr);
    client_ = testing::Connect(*fleet_);
    spec_ = testing::SmallSpec("bad-input", 2);
    ASSERT_TRUE(client_->RegisterModel(spec_).ok());
    total_ = client_->plan().total();
    std::mt19937_64 rng(5);
    init_ = testing::RandomVector(rng, total_, 0.1f);
    ASSERT_TRUE(client_->WriteParameters(Range{0, total_}, init_.data()).ok());
    // Shard 1's stub, for raw requests.
    owned_ = client_->plan().ServerRange(1);
    stub_ = v1::ShardService::NewStub(grpc::CreateChannel(
        fleet_->addresses()[1], grpc::InsecureChannelCredentials()));
  }

  // Everything that a bad request must not change.
  std::string Snapshot() {
    auto stats = client_->Stats();
    EXPECT_TRUE(stats.ok());
    std::string s;
    for (const auto& st : *stats) {
      s += absl::StrCat(st.step(), ",", st.optimizer_steps(), ",",
                        st.contributions_applied(), ",", st.elements_applied(),
                        ",", st.duplicates_ignored(), ",", st.epoch(), ";");
    }
    std::vector<float> p(total_);
    EXPECT_TRUE(
        client_->Gather(Range{0, total_}, v1::DTYPE_FP32, p.data()).ok());
    s.append(reinterpret_cast<const char*>(p.data()), p.size() * 4);
    return s;
  }

  v1::PushHeader Header(uint64_t offset, uint64_t length,
                        const std::string& key) {
    v1::PushHeader h;
    h.set_job_id("bad-input");
    h.set_epoch(0);
    h.set_step(0);
    h.set_slot(0);
    h.set_offset(offset);
    h.set_length(length);
    h.set_dtype(v1::DTYPE_FP32);
    h.set_idempotency_key(key);
    return h;
  }

  // Sends a push stream: `header`, then `chunks` as data messages.
  grpc::Status RawPush(const v1::PushHeader& header,
                       const std::vector<std::string>& chunks,
                       v1::PushGradientsResponse* resp = nullptr) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(10));
    v1::PushGradientsResponse r;
    auto w = stub_->PushGradients(&ctx, resp ? resp : &r);
    v1::PushGradientsRequest msg;
    *msg.mutable_header() = header;
    if (!w->Write(msg)) return w->Finish();
    for (const std::string& c : chunks) {
      v1::PushGradientsRequest d;
      d.set_data(c);
      if (!w->Write(d)) break;
    }
    w->WritesDone();
    return w->Finish();
  }

  static std::string Floats(uint64_t n, float value) {
    std::vector<float> v(n, value);
    return std::string(reinterpret_cast<const char*>(v.data()), n * 4);
  }

  std::unique_ptr<LocalFleet> fleet_;
  std::unique_ptr<ShardClient> client_;
  std::unique_ptr<v1::ShardService::Stub> stub_;
  v1::ModelSpec spec_;
  uint64_t total_ = 0;
  Range owned_;
  std::vector<float> init_;
};

#define EXPECT_REJECTED(call, code, needle)                         \
  do {                                                              \
    const std::string before = Snapshot();                          \
    const grpc::Status st = (call);                                 \
    EXPECT_EQ(st.error_code(), grpc::StatusCode::code)              \
        << #call << ": " << st.error_message();                     \
    EXPECT_NE(st.error_message().find(needle), std::string::npos)   \
        << #call << ": " << st.error_message();                     \
    EXPECT_TRUE(before == Snapshot()) << #call << " changed state"; \
  } while (0)

TEST_F(BadInputTest, EachBadRequestIsRejectedAndChangesNothing) {
  const uint64_t b = owned_.begin, n = owned_.size();
  // Wrong spec: a second registration that differs.
  {
    v1::RegisterModelRequest req;
    *req.mutable_spec() = spec_;
    req.mutable_spec()->mutable_tensors(3)->set_shape(0, 191 * 1);
    v1::RegisterModelResponse resp;
    grpc::ClientContext ctx;
    EXPECT_REJECTED(stub_->RegisterModel(&ctx, req, &resp), FAILED_PRECONDITION,
                    "tensors[3] ('fc.w') shape");
  }
  {
    v1::RegisterModelRequest req;
    *req.mutable_spec() = spec_;
    req.mutable_spec()->set_num_servers(3);
    v1::RegisterModelResponse resp;
    grpc::ClientContext ctx;
    EXPECT_REJECTED(stub_->RegisterModel(&ctx, req, &resp), FAILED_PRECONDITION,
                    "num_servers is 3");
  }
  {
    v1::RegisterModelRequest req;
    *req.mutable_spec() = spec_;
    req.mutable_spec()->mutable_param_groups(0)->set_beta2(1.5);
    v1::RegisterModelResponse resp;
    grpc::ClientContext ctx;
    EXPECT_REJECTED(stub_->RegisterModel(&ctx, req, &resp), INVALID_ARGUMENT,
                    "param_groups[0].beta2");
  }
  // Unknown tensor (client side) and unknown job (server side).
  EXPECT_EQ(client_->TensorRange("no.such.tensor").status().code(),
            absl::StatusCode::kNotFound);
  {
    v1::PushHeader h = Header(b, 64, "k-job");
    h.set_job_id("other-job");
    EXPECT_REJECTED(RawPush(h, {Floats(64, 1)}), NOT_FOUND, "other-job");
  }
  // Out-of-range and misaligned ranges.
  EXPECT_REJECTED(RawPush(Header(b + n, 64, "k1"), {Floats(64, 1)}),
                  INVALID_ARGUMENT, "outside the owned range");
  EXPECT_REJECTED(RawPush(Header(b - 64, 128, "k2"), {Floats(128, 1)}),
                  INVALID_ARGUMENT, "outside the owned range");
  EXPECT_REJECTED(RawPush(Header(b, std::numeric_limits<uint64_t>::max(), "k3"),
                          {Floats(64, 1)}),
                  INVALID_ARGUMENT, "outside the owned range");
  EXPECT_REJECTED(RawPush(Header(b + 3, 64, "k4"), {Floats(64, 1)}),
                  INVALID_ARGUMENT, "not aligned");
  EXPECT_REJECTED(RawPush(Header(b, 65, "k5"), {Floats(65, 1)}),
                  INVALID_ARGUMENT, "not aligned");
  // Wrong length: too little, too much.
  EXPECT_REJECTED(RawPush(Header(b, 128, "k6"), {Floats(64, 1)}),
                  INVALID_ARGUMENT, "ended after 64 of 128");
  EXPECT_REJECTED(RawPush(Header(b, 64, "k7"), {Floats(64, 1), Floats(1, 1)}),
                  INVALID_ARGUMENT, "more than the announced 64");
  // Wrong dtype: unknown enum, and bytes that are not whole elements.
  {
    v1::PushHeader h = Header(b, 64, "k8");
    h.set_dtype(static_cast<v1::DType>(9));
    EXPECT_REJECTED(RawPush(h, {Floats(64, 1)}), INVALID_ARGUMENT,
                    "unknown dtype");
    h.set_dtype(v1::DTYPE_UNSPECIFIED);
    EXPECT_REJECTED(RawPush(h, {Floats(64, 1)}), INVALID_ARGUMENT,
                    "unknown dtype");
  }
  {
    v1::PushHeader h = Header(b, 64, "k9");
    h.set_dtype(v1::DTYPE_BF16);
    EXPECT_REJECTED(RawPush(h, {std::string(127, 'x')}), INVALID_ARGUMENT,
                    "not a whole number");
  }
  // Stale and future steps.
  {
    v1::PushHeader h = Header(b, 64, "k10");
    h.set_step(1);
    EXPECT_REJECTED(RawPush(h, {Floats(64, 1)}), FAILED_PRECONDITION,
                    "future step 1");
  }
  // Missing header, empty key, bad slot.
  {
    grpc::ClientContext ctx;
    v1::PushGradientsResponse resp;
    auto w = stub_->PushGradients(&ctx, &resp);
    v1::PushGradientsRequest msg;
    msg.set_data(Floats(64, 1));
    w->Write(msg);
    w->WritesDone();
    EXPECT_REJECTED(w->Finish(), INVALID_ARGUMENT, "must carry a header");
  }
  EXPECT_REJECTED(RawPush(Header(b, 64, ""), {Floats(64, 1)}), INVALID_ARGUMENT,
                  "idempotency_key");
  {
    v1::PushHeader h = Header(b, 64, "k11");
    h.set_slot(1);
    EXPECT_REJECTED(RawPush(h, {Floats(64, 1)}), INVALID_ARGUMENT,
                    "slot 1 is not below contributions_per_step 1");
  }
  // Oversized message: refused by gRPC before any handler runs.
  EXPECT_REJECTED(RawPush(Header(b, n, "k12"), {Floats(1 << 19, 1)}),
                  RESOURCE_EXHAUSTED, "");
  // Gathers outside the owned range or in an unknown dtype.
  {
    v1::GatherRequest req;
    req.set_job_id("bad-input");
    req.set_offset(b + n - 1);
    req.set_length(2);
    req.set_dtype(v1::DTYPE_FP32);
    grpc::ClientContext ctx;
    auto r = stub_->Gather(&ctx, req);
    v1::GatherChunk chunk;
    EXPECT_FALSE(r->Read(&chunk));
    EXPECT_REJECTED(r->Finish(), INVALID_ARGUMENT, "outside the owned range");
  }
  // Commit before prepare; prepare of an incomplete step changes nothing.
  {
    v1::CommitStepRequest req;
    req.set_job_id("bad-input");
    req.set_clip_coef(1);
    req.set_lr(1e-3);
    v1::CommitStepResponse resp;
    grpc::ClientContext ctx;
    EXPECT_REJECTED(stub_->CommitStep(&ctx, req, &resp), FAILED_PRECONDITION,
                    "has not been prepared");
  }
  // A duplicate push is acknowledged and ignored; a reused key for another
  // range and an overlapping contribution are rejected.
  v1::PushGradientsResponse resp;
  ASSERT_TRUE(RawPush(Header(b, 64, "dup"), {Floats(64, 0.5f)}, &resp).ok());
  EXPECT_FALSE(resp.duplicate());
  {
    const std::string before = Snapshot();
    ASSERT_TRUE(RawPush(Header(b, 64, "dup"), {Floats(64, 0.5f)}, &resp).ok());
    EXPECT_TRUE(resp.duplicate());
    auto stats = client_->Stats();
    EXPECT_EQ((*stats)[1].duplicates_ignored(), 1u);
    EXPECT_EQ((*stats)[1].contributions_applied(), 1u);
  }
  EXPECT_REJECTED(RawPush(Header(b, 128, "dup"), {Floats(128, 1)}),
                  INVALID_ARGUMENT, "was used for a different contribution");
  EXPECT_REJECTED(RawPush(Header(b, 128, "other"), {Floats(128, 1)}),
                  FAILED_PRECONDITION, "overlaps a contribution");
  {
    v1::PrepareStepRequest req;
    req.set_job_id("bad-input");
    v1::PrepareStepResponse presp;
    const std::string before = Snapshot();
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->PrepareStep(&ctx, req, &presp).ok());
    EXPECT_FALSE(presp.complete());
    EXPECT_EQ(presp.received_elements(), 64u);
    EXPECT_EQ(presp.expected_elements(), n);
    EXPECT_TRUE(before == Snapshot());
  }

  // NaN/Inf gradients: reported through the overflow flag, never applied.
  std::vector<float> g(total_, 0.25f);
  g[b + 100] = std::numeric_limits<float>::quiet_NaN();
  g[b + 64] = std::numeric_limits<float>::infinity();
  ASSERT_TRUE(
      client_->Push(Range{0, b}, v1::DTYPE_FP32, g.data(), {0, 0, 0, "a"})
          .ok());
  ASSERT_TRUE(client_
                  ->Push(Range{b + 64, total_}, v1::DTYPE_FP32,
                         g.data() + b + 64, {0, 0, 0, "b"})
                  .ok());
  auto norm = client_->Prepare(0, 0);
  ASSERT_TRUE(norm.ok()) << norm.status();
  EXPECT_TRUE(norm->overflow);
  {
    v1::CommitStepRequest req;
    req.set_job_id("bad-input");
    req.set_clip_coef(1);
    req.set_lr(1e-3);
    v1::CommitStepResponse cresp;
    grpc::ClientContext ctx;
    EXPECT_REJECTED(stub_->CommitStep(&ctx, req, &cresp), FAILED_PRECONDITION,
                    "NaN/Inf");
    req.set_lr(std::nan(""));
    req.set_skip(false);
    grpc::ClientContext ctx2;
    EXPECT_REJECTED(stub_->CommitStep(&ctx2, req, &cresp), INVALID_ARGUMENT,
                    "lr nan");
  }
  ASSERT_TRUE(client_->Commit(0, 0, 1.0f, 1e-3, /*skip=*/true).ok());
  std::vector<float> p(total_);
  ASSERT_TRUE(client_->Gather(Range{0, total_}, v1::DTYPE_FP32, p.data()).ok());
  EXPECT_EQ(testing::FirstBitDifference(p, init_), -1)
      << "a skipped step changed parameters";
  // Stale step now.
  EXPECT_REJECTED(RawPush(Header(b, 64, "late"), {Floats(64, 1)}),
                  FAILED_PRECONDITION, "stale step 0");

  // A normal step afterwards is exact (the skipped step did not advance the
  // optimizer's t).
  testing::ReferenceAdamW reference(spec_, init_);
  std::mt19937_64 rng(9);
  std::vector<float> g1 = testing::RandomVector(rng, total_, 1.0f);
  ASSERT_TRUE(client_
                  ->Push(Range{0, total_}, v1::DTYPE_FP32, g1.data(),
                         {0, 1, 0, "step1"})
                  .ok());
  ASSERT_TRUE(client_->Prepare(0, 1).ok());
  ASSERT_TRUE(client_->Commit(0, 1, 0.5f, 2e-3, false).ok());
  reference.Step(g1, 0.5f, 2e-3);
  ASSERT_TRUE(client_->Gather(Range{0, total_}, v1::DTYPE_FP32, p.data()).ok());
  EXPECT_EQ(testing::FirstBitDifference(p, reference.params()), -1);
  // The server stayed up through all of it and counted the rejections.
  EXPECT_TRUE(
      CheckHealth(fleet_->addresses()[1], std::chrono::milliseconds(2000))
          .ok());
  auto stats = client_->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_GE((*stats)[1].requests_rejected(), 20u);
}

// GatherRanges: scattered ranges (across both servers) in one call equal
// the same ranges gathered one by one, with the servers' step, through
// shared memory (one request per piece) and over the stream (each
// server's pieces in one request, GatherRequest.more); output spans that
// do not match the ranges are INVALID_ARGUMENT naming both counts.
TEST_F(BadInputTest, GatherRangesEqualsGatheringEachRange) {
  const Range own = client_->plan().ServerRange(1);
  const std::vector<Range> ranges = {{0, 64},
                                     {128, 192},
                                     {own.begin - 64, own.begin + 128},
                                     {total_ - 64, total_}};
  std::vector<std::vector<float>> one(ranges.size());
  for (size_t k = 0; k < ranges.size(); ++k) {
    one[k].resize(ranges[k].size());
    ASSERT_TRUE(client_->Gather(ranges[k], v1::DTYPE_FP32, one[k].data()).ok());
  }
  for (bool shared : {true, false}) {
    SCOPED_TRACE(shared ? "shared memory" : "stream");
    ClientOptions o;
    o.addresses = fleet_->addresses();
    o.deadline = std::chrono::milliseconds(20000);
    o.shared_memory = shared;
    auto client = ShardClient::Connect(o);
    ASSERT_TRUE(client.ok()) << client.status();
    ASSERT_TRUE((*client)->RegisterModel(spec_).ok());
    const uint64_t requests = (*client)->gather_requests();
    std::vector<std::vector<float>> many(ranges.size());
    std::vector<void*> outs;
    for (size_t k = 0; k < ranges.size(); ++k) {
      many[k].resize(ranges[k].size(), -1.0f);
      outs.push_back(many[k].data());
    }
    uint64_t step = 99;
    ASSERT_TRUE(
        (*client)->GatherRanges(ranges, v1::DTYPE_FP32, outs, &step).ok());
    EXPECT_EQ(step, 0u);
    // Five pieces (the third range straddles the servers): five requests
    // through shared memory, one per server over the stream.
    EXPECT_EQ((*client)->gather_requests() - requests, shared ? 5u : 2u);
    for (size_t k = 0; k < ranges.size(); ++k) {
      EXPECT_EQ(testing::FirstBitDifference(many[k], one[k]), -1) << k;
      EXPECT_EQ(testing::FirstBitDifference(
                    many[k], std::vector<float>(init_.begin() + ranges[k].begin,
                                                init_.begin() + ranges[k].end)),
                -1)
          << k;
    }
    outs.pop_back();
    absl::Status bad = (*client)->GatherRanges(ranges, v1::DTYPE_FP32, outs);
    EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(bad.message().find("4 ranges but 3 output buffers"),
              std::string::npos)
        << bad;
  }
}

}  // namespace
}  // namespace zeroshard
