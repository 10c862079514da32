#include "common/subprocess.h"

#include <signal.h>

#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace zeroshard {
namespace {

TEST(StateFromProcStatTest, TheLetterAfterTheCommand) {
  EXPECT_EQ(StateFromProcStat("1234 (sleep) S 1 1234 1234 0 -1"), 'S');
  EXPECT_EQ(StateFromProcStat("1234 (zeroshard-worker) T 1 2"), 'T');
  // A command may hold spaces and parentheses of its own.
  EXPECT_EQ(StateFromProcStat("77 (a (b) c) t 1 2"), 't');
  EXPECT_EQ(StateFromProcStat("77 (x)) R 1"), 'R');
}

TEST(StateFromProcStatTest, NoStateIsQuestionMark) {
  EXPECT_EQ(StateFromProcStat(""), '?');
  EXPECT_EQ(StateFromProcStat("1234 (sleep"), '?');
  EXPECT_EQ(StateFromProcStat("1234 (sleep)"), '?');
}

// Waits up to 10 s for p.stopped() to become `want` (the kernel stops and
// continues a process asynchronously to kill()).
bool BecomesStopped(const Subprocess& p, bool want) {
  for (int i = 0; i < 1000; ++i) {
    if (p.stopped() == want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST(SubprocessTest, StoppedFollowsSigstopAndSigcont) {
  SpawnOptions o;
  o.argv = {"/bin/sleep", "30"};
  absl::StatusOr<Subprocess> p = Subprocess::Spawn(o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->stopped());
  p->Signal(SIGSTOP);
  EXPECT_TRUE(BecomesStopped(*p, true));
  p->Signal(SIGCONT);
  EXPECT_TRUE(BecomesStopped(*p, false));
  p->Stop(std::chrono::milliseconds(1000));
  EXPECT_FALSE(p->stopped());  // reaped
}

}  // namespace
}  // namespace zeroshard
