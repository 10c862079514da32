// The shared-memory data plane through real zeroshard-server processes on
// loopback: gathers and pushes through shared segments give the same bits
// as the stream; a server started with --shared_memory=false refuses and
// the client falls back to the stream for good; a request naming a segment
// the server cannot use is refused before anything changes.
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/model_spec.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/testing.h"

namespace zeroshard {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<ShardClient> ConnectWith(const LocalFleet& fleet,
                                         bool shared_memory) {
  ClientOptions options;
  options.addresses = fleet.addresses();
  options.deadline = std::chrono::milliseconds(20000);
  options.shared_memory = shared_memory;
  auto client = ShardClient::Connect(options);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? std::move(*client) : nullptr;
}

// Two steps, the first pushed through shared memory by `a`, the second
// over the stream by `b`; after each, both gather (one each way) and must
// agree bit for bit. Returns the parameters after the two steps.
std::vector<float> TwoSteps(ShardClient* a, ShardClient* b) {
  const v1::ModelSpec spec = testing::SmallSpec("shm", a->num_servers(), 3);
  EXPECT_TRUE(a->RegisterModel(spec).ok());
  EXPECT_TRUE(b->RegisterModel(spec).ok());
  const uint64_t total = a->plan().total();
  std::mt19937_64 rng(77);
  const std::vector<float> init = testing::RandomVector(rng, total, 0.02f);
  EXPECT_TRUE(a->WriteParameters(Range{0, total}, init.data()).ok());
  std::vector<float> pa(total), pb(total);
  for (uint64_t step = 0; step < 2; ++step) {
    ShardClient* pusher = step == 0 ? a : b;
    const std::vector<float> g = testing::RandomVector(rng, total, 0.5f);
    PushId id{0, step, 0, absl::StrCat("s", step)};
    absl::Status s =
        pusher->Push(Range{0, total}, v1::DTYPE_FP32, g.data(), id);
    EXPECT_TRUE(s.ok()) << s;
    auto norm = a->Prepare(0, step);
    EXPECT_TRUE(norm.ok()) << norm.status();
    EXPECT_TRUE(a->Commit(0, step, 1.0f, 1e-3, false).ok());
    uint64_t sa = 0, sb = 0;
    s = a->Gather(Range{0, total}, v1::DTYPE_FP32, pa.data(), &sa);
    EXPECT_TRUE(s.ok()) << s;
    s = b->Gather(Range{0, total}, v1::DTYPE_FP32, pb.data(), &sb);
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_EQ(sa, step + 1);
    EXPECT_EQ(sb, step + 1);
    EXPECT_EQ(std::memcmp(pa.data(), pb.data(), total * sizeof(float)), 0);
    EXPECT_NE(std::memcmp(pa.data(), init.data(), total * sizeof(float)), 0);
  }
  return pa;
}

TEST(SharedMemoryTest, SameBitsAsTheStream) {
  auto fleet = testing::StartFleet(2);
  ASSERT_NE(fleet, nullptr);
  auto shared = ConnectWith(*fleet, true);
  auto stream = ConnectWith(*fleet, false);
  ASSERT_NE(shared, nullptr);
  ASSERT_NE(stream, nullptr);
  const std::vector<float> after = TwoSteps(shared.get(), stream.get());
  // Still on after its calls: the servers took the segments.
  EXPECT_TRUE(shared->SharedMemoryOn(0));
  EXPECT_TRUE(shared->SharedMemoryOn(1));
  EXPECT_FALSE(stream->SharedMemoryOn(0));

  // The same steps where no one uses shared memory: the same bits.
  const std::string dir2 = ::testing::TempDir() + "/f2";
  ASSERT_EQ(mkdir(dir2.c_str(), 0755), 0);
  auto fleet2 = testing::StartFleet(2, {}, dir2);
  ASSERT_NE(fleet2, nullptr);
  auto s1 = ConnectWith(*fleet2, false);
  auto s2 = ConnectWith(*fleet2, false);
  EXPECT_EQ(TwoSteps(s1.get(), s2.get()), after);
}

TEST(SharedMemoryTest, AServerWithItOffIsReachedOverTheStream) {
  auto fleet = testing::StartFleet(2, {"--shared_memory=false"});
  ASSERT_NE(fleet, nullptr);
  auto a = ConnectWith(*fleet, true);
  auto b = ConnectWith(*fleet, false);
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(a->SharedMemoryOn(0));  // loopback: it tries
  TwoSteps(a.get(), b.get());
  EXPECT_FALSE(a->SharedMemoryOn(0));  // refused once, then the stream
  EXPECT_FALSE(a->SharedMemoryOn(1));
}

TEST(SharedMemoryTest, NotTriedForAddressesOffThisHost) {
  ClientOptions options;
  options.addresses = {"127.0.0.1:1", "localhost:2", "[::1]:3", "10.1.2.3:4",
                       "shard-0.zeroshard:5"};
  auto client = ShardClient::Connect(options);
  ASSERT_TRUE(client.ok());
  EXPECT_TRUE((*client)->SharedMemoryOn(0));
  EXPECT_TRUE((*client)->SharedMemoryOn(1));
  EXPECT_TRUE((*client)->SharedMemoryOn(2));
  EXPECT_FALSE((*client)->SharedMemoryOn(3));
  EXPECT_FALSE((*client)->SharedMemoryOn(4));
}

TEST(SharedMemoryTest, TheEnvironmentCanTurnItOff) {
  ClientOptions options;
  options.addresses = {"127.0.0.1:1"};
  setenv("ZEROSHARD_SHARED_MEMORY", "0", 1);
  auto off = ShardClient::Connect(options);
  setenv("ZEROSHARD_SHARED_MEMORY", "sometimes", 1);
  auto bad = ShardClient::Connect(options);
  setenv("ZEROSHARD_SHARED_MEMORY", "1", 1);
  auto on = ShardClient::Connect(options);
  unsetenv("ZEROSHARD_SHARED_MEMORY");
  ASSERT_TRUE(off.ok() && on.ok());
  EXPECT_FALSE((*off)->SharedMemoryOn(0));
  EXPECT_TRUE((*on)->SharedMemoryOn(0));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("$ZEROSHARD_SHARED_MEMORY is \"sometimes\""));
}

// A raw push naming a segment the server cannot map: refused with the
// "shared memory: " reason before the range is reserved, so the same key
// pushed over the stream is then applied.
TEST(SharedMemoryTest, ABadSegmentIsRefusedAndChangesNothing) {
  auto fleet = testing::StartFleet(1);
  ASSERT_NE(fleet, nullptr);
  auto client = ConnectWith(*fleet, false);
  const v1::ModelSpec spec = testing::SmallSpec("shm-bad", 1, 1);
  ASSERT_TRUE(client->RegisterModel(spec).ok());
  const uint64_t total = client->plan().total();
  auto stub = v1::ShardService::NewStub(client->Channel(0, 0));

  v1::SharedRef ref;
  ref.set_pid(0x7ffffff0u);
  ref.set_fd(3);
  ref.set_token(std::string(kSharedTokenBytes, 't'));
  ref.set_offset(kSharedHeaderBytes);
  v1::PushGradientsRequest req;
  v1::PushHeader* h = req.mutable_header();
  h->set_job_id("shm-bad");
  h->set_step(0);
  h->set_offset(0);
  h->set_length(total);
  h->set_dtype(v1::DTYPE_FP32);
  h->set_idempotency_key("k/0");
  *req.mutable_shared() = ref;
  grpc::ClientContext ctx;
  v1::PushGradientsResponse resp;
  auto writer = stub->PushGradients(&ctx, &resp);
  writer->Write(req);
  writer->WritesDone();
  grpc::Status st = writer->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(st.error_message(), HasSubstr("shared memory: cannot see"));

  // A gather naming it: refused the same way.
  grpc::ClientContext gctx;
  v1::GatherRequest greq;
  greq.set_job_id("shm-bad");
  greq.set_length(total);
  greq.set_dtype(v1::DTYPE_FP32);
  *greq.mutable_shared() = ref;
  auto reader = stub->Gather(&gctx, greq);
  v1::GatherChunk chunk;
  EXPECT_FALSE(reader->Read(&chunk));
  st = reader->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);

  // Nothing was reserved or counted: the key goes through whole.
  std::vector<float> g(total, 0.25f);
  ASSERT_TRUE(client
                  ->Push(Range{0, total}, v1::DTYPE_FP32, g.data(),
                         PushId{0, 0, 0, "k"})
                  .ok());
  auto norm = client->Prepare(0, 0);
  ASSERT_TRUE(norm.ok()) << norm.status();
  EXPECT_DOUBLE_EQ(norm->sum_squares, 0.0625 * total);
}

}  // namespace
}  // namespace zeroshard
