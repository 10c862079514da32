// Issue 23, item 6, against real zeroshard-server processes: push streams
// that send their header and a first chunk, then stall, hold their ranges
// only until --stream_idle_timeout_seconds passes or they are cancelled;
// a legitimate push of the same range then succeeds. No timing
// thresholds: the tests poll with generous deadlines, probing with
// incomplete pushes that can never record a contribution.
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/zeroshard.grpc.pb.h"
#include "tests/testing.h"

namespace zeroshard {
namespace {

constexpr char kJob[] = "hard-stall";

std::string Floats(uint64_t n, float value) {
  std::vector<float> v(n, value);
  return std::string(reinterpret_cast<const char*>(v.data()), n * 4);
}

v1::PushHeader Header(uint64_t offset, uint64_t length,
                      const std::string& key) {
  v1::PushHeader h;
  h.set_job_id(kJob);
  h.set_offset(offset);
  h.set_length(length);
  h.set_dtype(v1::DTYPE_FP32);
  h.set_idempotency_key(key);
  return h;
}

// A push stream that sends its header and one chunk of half its range,
// then nothing.
struct StalledPush {
  grpc::ClientContext ctx;
  v1::PushGradientsResponse resp;
  std::unique_ptr<grpc::ClientWriter<v1::PushGradientsRequest>> writer;

  StalledPush(v1::ShardService::Stub* stub, const v1::PushHeader& h) {
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(120));
    writer = stub->PushGradients(&ctx, &resp);
    v1::PushGradientsRequest msg;
    *msg.mutable_header() = h;
    msg.set_data(Floats(h.length() / 2, 1.0f));
    EXPECT_TRUE(writer->Write(msg));
  }
  grpc::Status Finish() {
    finished = true;
    return writer->Finish();
  }
  ~StalledPush() {
    if (finished) return;
    ctx.TryCancel();
    (void)writer->Finish();
  }
  bool finished = false;
};

class StalledStreamTest : public ::testing::Test {
 protected:
  void Start(std::vector<std::string> flags) {
    fleet_ = testing::StartFleet(1, std::move(flags));
    ASSERT_NE(fleet_, nullptr);
    client_ = testing::Connect(*fleet_);
    ASSERT_TRUE(client_->RegisterModel(testing::SmallSpec(kJob, 1)).ok());
    // Each stub on its own connection: stalled streams must not hold back
    // the legitimate push through the per-connection stream limit.
    grpc::ChannelArguments args;
    args.SetInt("zeroshard-test-channel", 1);
    stall_stub_ = v1::ShardService::NewStub(grpc::CreateCustomChannel(
        fleet_->addresses()[0], grpc::InsecureChannelCredentials(), args));
    args.SetInt("zeroshard-test-channel", 2);
    stub_ = v1::ShardService::NewStub(grpc::CreateCustomChannel(
        fleet_->addresses()[0], grpc::InsecureChannelCredentials(), args));
  }

  // A complete push of `h`'s range; with `incomplete`, only half its data
  // and then the end of the stream.
  grpc::Status Push(const v1::PushHeader& h, bool incomplete = false) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(30));
    v1::PushGradientsResponse resp;
    auto w = stub_->PushGradients(&ctx, &resp);
    v1::PushGradientsRequest msg;
    *msg.mutable_header() = h;
    msg.set_data(Floats(incomplete ? h.length() / 2 : h.length(), 0.25f));
    if (w->Write(msg)) w->WritesDone();
    return w->Finish();
  }

  // Pushes `h` until it succeeds or `seconds` pass; the last status.
  grpc::Status PushUntilAccepted(const v1::PushHeader& h, int seconds) {
    const auto until =
        std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    grpc::Status s;
    do {
      s = Push(h);
      if (s.ok()) return s;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    } while (std::chrono::steady_clock::now() < until);
    return s;
  }

  // An incomplete push of `h`'s range (half its data, then the end of the
  // stream): refused whether or not the range is taken, so it never
  // records a contribution — as the whole push once did when it got there
  // before the stalled stream's header.
  grpc::Status ProbePush(const v1::PushHeader& h) {
    return Push(h, /*incomplete=*/true);
  }

  // Until a probe of `h`'s range is refused because the range is taken
  // (the stalled stream's header has arrived).
  void AwaitReserved(const v1::PushHeader& h) {
    const auto until =
        std::chrono::steady_clock::now() + std::chrono::seconds(30);
    grpc::Status s;
    do {
      s = ProbePush(h);
      ASSERT_FALSE(s.ok()) << "an incomplete push was accepted";
      if (s.error_message().find("overlaps") != std::string::npos) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    } while (std::chrono::steady_clock::now() < until);
    FAIL() << "the stalled stream never reserved its range: "
           << s.error_message();
  }

  std::unique_ptr<LocalFleet> fleet_;
  std::unique_ptr<ShardClient> client_;
  std::unique_ptr<v1::ShardService::Stub> stall_stub_, stub_;
};

// Stalled streams (eight of them, disjoint ranges) time out after the
// idle deadline; legitimate pushes of their ranges then succeed, and the
// step completes.
TEST_F(StalledStreamTest, IdleStreamsTimeOutAndReleaseTheirRanges) {
  Start({"--stream_idle_timeout_seconds=2"});
  const uint64_t total = client_->plan().total();
  const uint64_t piece = total / 8 / 64 * 64;
  // A probe of a free range is refused for its missing data and records
  // nothing (the legitimate push of that range below succeeds).
  const grpc::Status early = ProbePush(Header(0, piece, "early"));
  EXPECT_FALSE(early.ok());
  EXPECT_NE(early.error_message().find("ended after"), std::string::npos)
      << early.error_message();
  std::vector<std::unique_ptr<StalledPush>> stalls;
  for (int i = 0; i < 8; ++i) {
    stalls.push_back(std::make_unique<StalledPush>(
        stall_stub_.get(),
        Header(i * piece, piece, absl::StrCat("stall-", i))));
  }
  AwaitReserved(Header(0, piece, "probe"));
  for (int i = 0; i < 8; ++i) {
    const uint64_t end = i == 7 ? total : (i + 1) * piece;
    const grpc::Status s = PushUntilAccepted(
        Header(i * piece, end - i * piece, absl::StrCat("legit-", i)), 60);
    EXPECT_TRUE(s.ok()) << "piece " << i << ": " << s.error_message();
  }
  auto norm = client_->Prepare(0, 0);
  ASSERT_TRUE(norm.ok()) << norm.status();
  EXPECT_TRUE(norm->sum_squares > 0);
  // The stalled streams were ended by the server.
  for (auto& stall : stalls) EXPECT_FALSE(stall->Finish().ok());
}

// A stalled stream cancelled by its client releases its range at once
// (well before the default 60 s idle deadline).
TEST_F(StalledStreamTest, CancelledStreamReleasesItsRange) {
  Start({});
  auto stall =
      std::make_unique<StalledPush>(stall_stub_.get(), Header(0, 128, "stall"));
  AwaitReserved(Header(0, 128, "probe"));
  stall->ctx.TryCancel();
  const grpc::Status s = PushUntilAccepted(Header(0, 128, "legit"), 30);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

}  // namespace
}  // namespace zeroshard
