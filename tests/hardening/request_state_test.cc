// Issue 23, items 5, 7 and 11, against one real zeroshard-server (which
// also hosts the membership service):
//   5.  a rejected WriteParameters stream or push changes nothing: chunks
//       before the bad one are not kept; a newer-epoch push with a bad
//       payload neither raises the epoch nor discards the pending step; an
//       epoch near 2^64 is refused and later steps still work;
//   7.  Join refuses huge or control-character names and addresses
//       (INVALID_ARGUMENT naming the field); other members keep working;
//   11. malformed bodies to every unary method answer INVALID_ARGUMENT
//       naming the method; error texts quote a bounded prefix of a huge
//       client string.
#include <cmath>
#include <future>
#include <limits>
#include <random>

#include "absl/strings/str_cat.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/zeroshard.grpc.pb.h"
#include "tests/testing.h"

namespace zeroshard {
namespace {

constexpr char kJob[] = "hard-state";

std::string Floats(uint64_t n, float value) {
  std::vector<float> v(n, value);
  return std::string(reinterpret_cast<const char*>(v.data()), n * 4);
}

std::chrono::system_clock::time_point Soon() {
  return std::chrono::system_clock::now() + std::chrono::seconds(30);
}

class RequestStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fleet_ = testing::StartFleet(1);
    ASSERT_NE(fleet_, nullptr);
    client_ = testing::Connect(*fleet_);
    ASSERT_TRUE(client_->RegisterModel(testing::SmallSpec(kJob, 1)).ok());
    total_ = client_->plan().total();
    std::mt19937_64 rng(23);
    init_ = testing::RandomVector(rng, total_, 0.1f);
    ASSERT_TRUE(client_->WriteParameters(Range{0, total_}, init_.data()).ok());
    // Large enough trailers that an echoed client string would arrive
    // whole.
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_MAX_METADATA_SIZE, 8 << 20);
    channel_ = grpc::CreateCustomChannel(
        fleet_->addresses()[0], grpc::InsecureChannelCredentials(), args);
    stub_ = v1::ShardService::NewStub(channel_);
  }

  std::vector<float> GatherAll() {
    std::vector<float> p(total_);
    EXPECT_TRUE(
        client_->Gather(Range{0, total_}, v1::DTYPE_FP32, p.data()).ok());
    return p;
  }
  uint64_t Epoch() {
    auto stats = client_->Stats();
    EXPECT_TRUE(stats.ok()) << stats.status();
    return stats.ok() ? (*stats)[0].epoch() : ~0ull;
  }

  v1::PushHeader Header(uint64_t epoch, uint64_t offset, uint64_t length,
                        const std::string& key) {
    v1::PushHeader h;
    h.set_job_id(kJob);
    h.set_epoch(epoch);
    h.set_step(0);
    h.set_offset(offset);
    h.set_length(length);
    h.set_dtype(v1::DTYPE_FP32);
    h.set_idempotency_key(key);
    return h;
  }

  // A push stream: the header, then `chunks` as data messages.
  grpc::Status RawPush(const v1::PushHeader& header,
                       const std::vector<std::string>& chunks) {
    grpc::ClientContext ctx;
    ctx.set_deadline(Soon());
    v1::PushGradientsResponse resp;
    auto w = stub_->PushGradients(&ctx, &resp);
    v1::PushGradientsRequest msg;
    *msg.mutable_header() = header;
    if (w->Write(msg)) {
      for (const std::string& c : chunks) {
        v1::PushGradientsRequest d;
        d.set_data(c);
        if (!w->Write(d)) break;
      }
      w->WritesDone();
    }
    return w->Finish();
  }

  // A unary call of `method` with `body` as its request bytes.
  grpc::Status RawUnary(const std::string& method, const std::string& body,
                        std::string* response = nullptr) {
    grpc::GenericStub generic(channel_);
    grpc::ClientContext ctx;
    ctx.set_deadline(Soon());
    grpc::Slice slice(body);
    grpc::ByteBuffer request(&slice, 1), reply;
    std::promise<grpc::Status> done;
    generic.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &reply,
                      [&](grpc::Status s) { done.set_value(s); });
    grpc::Status s = done.get_future().get();
    if (s.ok() && response != nullptr) {
      std::vector<grpc::Slice> slices;
      (void)reply.Dump(&slices);
      response->clear();
      for (const auto& sl : slices) {
        response->append(reinterpret_cast<const char*>(sl.begin()), sl.size());
      }
    }
    return s;
  }

  std::unique_ptr<LocalFleet> fleet_;
  std::unique_ptr<ShardClient> client_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ShardService::Stub> stub_;
  uint64_t total_ = 0;
  std::vector<float> init_;
};

// 5(a): a good first chunk, then a bad one (or a short stream): the
// stream is refused and the first chunk is not kept.
TEST_F(RequestStateTest, RejectedWriteKeepsNoChunk) {
  const std::vector<float> before = GatherAll();
  for (const std::string& bad : {std::string("abc"), std::string()}) {
    grpc::ClientContext ctx;
    ctx.set_deadline(Soon());
    v1::WriteParametersResponse resp;
    auto w = stub_->WriteParameters(&ctx, &resp);
    v1::WriteParametersRequest first;
    first.mutable_header()->set_job_id(kJob);
    first.mutable_header()->set_offset(0);
    first.mutable_header()->set_length(256);
    first.mutable_header()->set_dtype(v1::DTYPE_FP32);
    first.set_data(Floats(128, 7.0f));
    ASSERT_TRUE(w->Write(first));
    if (!bad.empty()) {
      v1::WriteParametersRequest second;
      second.set_data(bad);
      w->Write(second);
    }
    w->WritesDone();
    const grpc::Status s = w->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << s.error_message();
    EXPECT_TRUE(GatherAll() == before)
        << "a rejected WriteParameters stream changed the weights (bad chunk "
        << (bad.empty() ? "none: short stream" : bad) << ")";
  }
}

// 5(b): a push of epoch + 1 whose payload is bad is refused; the epoch
// stays and the pending step is intact: a correct push at the old epoch
// completes it with exactly the old contributions.
TEST_F(RequestStateTest, RejectedNewerEpochPushKeepsThePendingStep) {
  const uint64_t half = total_ / 2 / 64 * 64;
  std::mt19937_64 rng(5);
  const std::vector<float> g = testing::RandomVector(rng, total_, 1.0f);
  PushId id{0, 0, 0, "first"};
  ASSERT_TRUE(client_->Push(Range{0, half}, v1::DTYPE_FP32, g.data(), id).ok());
  // Epoch 1 over the received half, a good chunk then a bad one; and over
  // the other half, a good chunk then the stream ends short.
  grpc::Status s = RawPush(Header(1, 0, half, "new-epoch-a"),
                           {Floats(64, 100.0f), std::string("xyz")});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << s.error_message();
  s = RawPush(Header(1, half, total_ - half, "new-epoch-b"),
              {Floats(64, 100.0f)});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << s.error_message();
  EXPECT_EQ(Epoch(), 0u) << "a rejected push moved the epoch";
  id.key_prefix = "second";
  ASSERT_TRUE(
      client_->Push(Range{half, total_}, v1::DTYPE_FP32, g.data() + half, id)
          .ok());
  auto norm = client_->Prepare(0, 0);
  ASSERT_TRUE(norm.ok()) << norm.status();
  const double want = testing::ReferenceAdamW::SumSquares(g);
  EXPECT_NEAR(norm->sum_squares, want, 1e-9 * want)
      << "the pending step's gradients were changed by a rejected push";
  EXPECT_TRUE(client_->Commit(0, 0, 1.0f, 1e-3, false).ok());
}

// 5(c): an epoch of 2^64-1 is refused; the server is not wedged: normal
// pushes, a real epoch change and steps go on.
TEST_F(RequestStateTest, HugeEpochIsRefusedAndStepsGoOn) {
  const std::vector<float> before = GatherAll();
  const grpc::Status s =
      RawPush(Header(std::numeric_limits<uint64_t>::max(), 0, total_, "huge"),
              {Floats(total_, 1.0f)});
  EXPECT_FALSE(s.ok()) << "an epoch of 2^64-1 was accepted";
  EXPECT_EQ(Epoch(), 0u);
  EXPECT_TRUE(GatherAll() == before);
  std::vector<float> g(total_, 0.5f);
  for (uint64_t epoch : {0, 1}) {
    const uint64_t step = epoch;
    PushId id{epoch, step, 0, absl::StrCat("ok-", epoch)};
    absl::Status p =
        client_->Push(Range{0, total_}, v1::DTYPE_FP32, g.data(), id);
    ASSERT_TRUE(p.ok()) << p;
    auto norm = client_->Prepare(epoch, step);
    ASSERT_TRUE(norm.ok()) << norm.status();
    ASSERT_TRUE(client_->Commit(epoch, step, 1.0f, 1e-3, false).ok());
  }
  EXPECT_EQ(Epoch(), 1u);
}

// 11: bytes that are no protobuf, and a truncated message, to every unary
// method: INVALID_ARGUMENT naming the method; nothing changes.
TEST_F(RequestStateTest, MalformedUnaryBodiesAreInvalidArgument) {
  v1::RegisterModelRequest reg;
  *reg.mutable_spec() = testing::SmallSpec(kJob, 1);
  const std::string valid = reg.SerializeAsString();
  const std::vector<std::string> bodies = {
      std::string("\xff\xff\xff\xff", 4),  // a truncated varint tag
      valid.substr(0, valid.size() / 2),   // cut inside a nested message
  };
  const std::vector<std::string> methods = {
      "/zeroshard.v1.ShardService/RegisterModel",
      "/zeroshard.v1.ShardService/GetStats",
      "/zeroshard.v1.ShardService/PrepareStep",
      "/zeroshard.v1.ShardService/CommitStep",
      "/zeroshard.v1.ShardService/Checkpoint",
      "/zeroshard.v1.ShardService/Restore",
      "/zeroshard.v1.MembershipService/Join",
      "/zeroshard.v1.MembershipService/Heartbeat",
      "/zeroshard.v1.MembershipService/Leave",
      "/zeroshard.v1.MembershipService/Rendezvous",
  };
  const std::vector<float> before = GatherAll();
  for (const std::string& method : methods) {
    const std::string name = method.substr(method.rfind('/') + 1);
    for (const std::string& body : bodies) {
      const grpc::Status s = RawUnary(method, body);
      EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
          << method << ": " << s.error_message();
      EXPECT_NE(s.error_message().find(name), std::string::npos)
          << method << ": '" << s.error_message() << "'";
    }
  }
  EXPECT_TRUE(GatherAll() == before);
  EXPECT_EQ(Epoch(), 0u);
}

// 11: a 500 KB job name is quoted by a bounded prefix in every answer.
TEST_F(RequestStateTest, ErrorTextsQuoteABoundedPrefix) {
  const std::string huge(500 << 10, 'j');
  v1::GetStatsRequest stats;
  stats.set_job_id(huge);
  v1::PrepareStepRequest prepare;
  prepare.set_job_id(huge);
  v1::JoinRequest join;
  join.set_job_id(huge);
  join.set_worker_name("w");
  const std::vector<std::pair<std::string, std::string>> calls = {
      {"/zeroshard.v1.ShardService/GetStats", stats.SerializeAsString()},
      {"/zeroshard.v1.ShardService/PrepareStep", prepare.SerializeAsString()},
      {"/zeroshard.v1.MembershipService/Join", join.SerializeAsString()},
  };
  for (const auto& [method, body] : calls) {
    std::string reply;
    const grpc::Status s = RawUnary(method, body, &reply);
    EXPECT_LT(s.error_message().size(), 1024u)
        << method << " (" << s.error_code() << ") echoed "
        << s.error_message().size() << " bytes";
    EXPECT_LT(reply.size(), 1024u)
        << method << " answered OK with " << reply.size() << " bytes";
  }
  // A push's header, through the data plane.
  v1::PushHeader h = Header(0, 0, 64, "k");
  h.set_job_id(huge);
  const grpc::Status s = RawPush(h, {Floats(64, 1.0f)});
  EXPECT_FALSE(s.ok());
  EXPECT_LT(s.error_message().size(), 1024u);
}

// 7: Join with a 600 KB address, or control characters in a name, is
// INVALID_ARGUMENT naming the field; the member already there still
// heartbeats.
TEST_F(RequestStateTest, JoinRefusesHugeAndControlCharacterFields) {
  auto membership = v1::MembershipService::NewStub(channel_);
  auto join = [&](const v1::JoinRequest& req, v1::JoinResponse* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(Soon());
    return membership->Join(&ctx, req, resp);
  };
  v1::JoinRequest good;
  good.set_job_id(kJob);
  good.set_worker_name("host-a:1234");
  good.set_address("10.0.0.1:5000");
  v1::JoinResponse joined;
  ASSERT_TRUE(join(good, &joined).ok());

  struct Bad {
    std::string field;
    v1::JoinRequest req;
  };
  std::vector<Bad> bad;
  for (const char* field : {"address", "worker_name", "node", "job_id"}) {
    for (const std::string& value :
         {std::string(600 << 10, 'a'), std::string("x\naudit: allowed"),
          std::string("x\x01y", 3)}) {
      v1::JoinRequest r = good;
      r.set_worker_name(absl::StrCat("bad-", bad.size()));
      const std::string f = field;
      if (f == "address") r.set_address(value);
      if (f == "worker_name") r.set_worker_name(value);
      if (f == "node") r.set_node(value);
      if (f == "job_id") r.set_job_id(value);
      bad.push_back({f, r});
    }
  }
  for (const Bad& b : bad) {
    v1::JoinResponse resp;
    const grpc::Status s = join(b.req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << b.field << ": " << s.error_message();
    EXPECT_NE(s.error_message().find(b.field), std::string::npos)
        << s.error_message().substr(0, 200);
    EXPECT_LT(s.error_message().size(), 1024u);
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(Soon());
  v1::HeartbeatRequest hb;
  hb.set_job_id(kJob);
  hb.set_member_id(joined.member_id());
  v1::HeartbeatResponse view;
  const grpc::Status s = membership->Heartbeat(&ctx, hb, &view);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(view.world().members_size(), 1);
  EXPECT_EQ(view.world().epoch(), joined.world().epoch());
}

}  // namespace
}  // namespace zeroshard
