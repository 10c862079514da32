// SharedSegments (server/shared_memory.h) against real memfd segments that
// this process makes with the client's SegmentPool (the server side maps
// them through this process's pid like any client's): what it accepts,
// what it refuses and why, bounds, the mapping cache, and the pool.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "client/shared_memory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/shared_memory.h"

namespace zeroshard {
namespace {

using ::testing::HasSubstr;

v1::SharedRef RefOf(const SegmentPool::Lease& lease) { return lease.ref(); }

TEST(SharedSegmentsTest, MapsAClientSegmentAndSeesItsBytes) {
  SegmentPool pool;
  auto lease = pool.Acquire(4096);
  ASSERT_TRUE(lease.ok()) << lease.status();
  std::memcpy(lease->data(), "gradient", 8);
  SharedSegments segments;
  auto view = segments.Resolve(RefOf(*lease), 4096);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(std::memcmp(view->data, "gradient", 8), 0);
  // Written by the server, read by the client (a gather).
  std::memcpy(view->data + 100, "params", 6);
  EXPECT_EQ(std::memcmp(lease->data() + 100, "params", 6), 0);
  EXPECT_EQ(segments.size(), 1u);
  // The second request finds the mapping.
  ASSERT_TRUE(segments.Resolve(RefOf(*lease), 8).ok());
  EXPECT_EQ(segments.size(), 1u);
}

TEST(SharedSegmentsTest, RefusesAWrongToken) {
  SegmentPool pool;
  auto lease = pool.Acquire(64);
  ASSERT_TRUE(lease.ok());
  v1::SharedRef ref = RefOf(*lease);
  std::string token = ref.token();
  token[0] ^= 1;
  ref.set_token(token);
  SharedSegments segments;
  auto view = segments.Resolve(ref, 64);
  EXPECT_EQ(view.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(view.status().message()),
              HasSubstr("does not hold the request's token"));
  ref.set_token("short");
  EXPECT_EQ(segments.Resolve(ref, 64).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(segments.size(), 0u);
}

TEST(SharedSegmentsTest, RefusesWhatIsNotASealedZeroshardSegment) {
  SharedSegments segments;
  v1::SharedRef ref;
  ref.set_pid(static_cast<uint32_t>(getpid()));
  ref.set_token(std::string(kSharedTokenBytes, 'x'));
  ref.set_offset(kSharedHeaderBytes);

  // An unsealed memfd with the right name: it could shrink under us.
  const int unsealed = memfd_create(kSharedSegmentName, MFD_CLOEXEC);
  ASSERT_GE(unsealed, 0);
  ASSERT_EQ(ftruncate(unsealed, 1 << 20), 0);
  ref.set_fd(static_cast<uint32_t>(unsealed));
  auto view = segments.Resolve(ref, 64);
  EXPECT_EQ(view.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(view.status().message()),
              HasSubstr("not sealed against shrinking"));
  close(unsealed);

  // Another memfd (not ours by name), and a plain pipe.
  const int other = memfd_create("someone-else", MFD_CLOEXEC);
  ASSERT_GE(other, 0);
  ref.set_fd(static_cast<uint32_t>(other));
  EXPECT_THAT(std::string(segments.Resolve(ref, 64).status().message()),
              HasSubstr("is not a zeroshard segment"));
  close(other);
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  ref.set_fd(static_cast<uint32_t>(pipe_fds[0]));
  EXPECT_EQ(segments.Resolve(ref, 64).status().code(),
            absl::StatusCode::kFailedPrecondition);
  close(pipe_fds[0]);
  close(pipe_fds[1]);

  // A process that is not there (pid numbers stop well below 2^31).
  ref.set_pid(0x7ffffff0u);
  view = segments.Resolve(ref, 64);
  EXPECT_EQ(view.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(view.status().message()),
              HasSubstr("shared memory: cannot see /proc/"));
  EXPECT_EQ(segments.size(), 0u);
}

TEST(SharedSegmentsTest, RangesOutsideTheSegmentAreInvalid) {
  SegmentPool pool;
  auto lease = pool.Acquire(1000);
  ASSERT_TRUE(lease.ok());
  SharedSegments segments;
  v1::SharedRef ref = RefOf(*lease);
  const uint64_t room = (1u << 20) - kSharedHeaderBytes;  // 1 MiB segment
  EXPECT_TRUE(segments.Resolve(ref, room).ok());
  EXPECT_EQ(segments.Resolve(ref, room + 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  ref.set_offset(0);  // over the token
  EXPECT_EQ(segments.Resolve(ref, 8).status().code(),
            absl::StatusCode::kInvalidArgument);
  ref.set_offset(~uint64_t{0});  // no wrap-around
  EXPECT_EQ(segments.Resolve(ref, 8).status().code(),
            absl::StatusCode::kInvalidArgument);
  ref.set_offset(kSharedHeaderBytes + 16);
  EXPECT_EQ(segments.Resolve(ref, ~uint64_t{0} - 8).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SharedSegmentsTest, EvictsTheLeastRecentlyUsedButNotViewsInUse) {
  SharedSegments::Options options;
  options.max_segments = 2;
  SharedSegments segments(options);
  SegmentPool pool;
  auto a = pool.Acquire(10);
  auto b = pool.Acquire(10);
  auto c = pool.Acquire(10);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  std::memcpy(a->data(), "aaaa", 4);
  auto view_a = segments.Resolve(RefOf(*a), 4);
  ASSERT_TRUE(view_a.ok());
  ASSERT_TRUE(segments.Resolve(RefOf(*b), 4).ok());
  ASSERT_TRUE(segments.Resolve(RefOf(*c), 4).ok());  // evicts a
  EXPECT_EQ(segments.size(), 2u);
  // The view taken before still reads a's bytes (its mapping lives).
  EXPECT_EQ(std::memcmp(view_a->data, "aaaa", 4), 0);
  // a maps again on its next use.
  ASSERT_TRUE(segments.Resolve(RefOf(*a), 4).ok());
  EXPECT_EQ(segments.size(), 2u);
}

TEST(SegmentPoolTest, ReusesFreeSegmentsButNeverDiscardedOnes) {
  SegmentPool pool;
  std::string first_token;
  {
    auto lease = pool.Acquire(100);
    ASSERT_TRUE(lease.ok());
    first_token = lease->ref().token();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(lease->data()) % 64, 0u);
  }
  {
    auto again = pool.Acquire(200);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->ref().token(), first_token);  // reused
    auto second = pool.Acquire(200);  // the first is lent: a new one
    ASSERT_TRUE(second.ok());
    EXPECT_NE(second->ref().token(), first_token);
    again->Discard();
  }
  EXPECT_EQ(pool.created(), 2u);
  auto big = pool.Acquire(3 << 20);  // larger than any free one
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(pool.created(), 3u);
  auto small = pool.Acquire(10);  // the second, not the discarded first
  ASSERT_TRUE(small.ok());
  EXPECT_NE(small->ref().token(), first_token);
  EXPECT_EQ(pool.created(), 3u);
}

}  // namespace
}  // namespace zeroshard
