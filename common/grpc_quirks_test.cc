#include "common/grpc_quirks.h"

#include <cerrno>
#include <cstring>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace zeroshard {
namespace {

// Two threads queue on a held absl::Mutex; the second to queue reads its
// scheduling priority and, the first time in the process, the CPU's
// frequency. Once PrepareForGrpcClients ran, both come back from Lock()
// with errno as they left it (without it, on a machine without
// /sys/devices/system/cpu/cpu0/tsc_freq_khz, one comes back ENOENT). If
// the threads start too late to find the lock held, it passes without
// proving anything; it never fails for timing.
TEST(GrpcQuirksTest, ContendedLockLeavesErrnoAlone) {
  PrepareForGrpcClients();
  absl::Mutex mu;
  int after[2] = {-1, -1};
  mu.Lock();
  std::thread waiters[2];
  for (int i = 0; i < 2; ++i) {
    waiters[i] = std::thread([&, i] {
      errno = 0;
      mu.Lock();
      after[i] = errno;
      mu.Unlock();
    });
  }
  absl::SleepFor(absl::Milliseconds(200));  // both queue behind the lock
  mu.Unlock();
  for (std::thread& t : waiters) t.join();
  EXPECT_EQ(after[0], 0) << std::strerror(after[0]);
  EXPECT_EQ(after[1], 0) << std::strerror(after[1]);
}

TEST(GrpcQuirksTest, KeepsTheCallersErrno) {
  errno = EAGAIN;
  PrepareForGrpcClients();
  EXPECT_EQ(errno, EAGAIN);
}

}  // namespace
}  // namespace zeroshard
