#include "common/fault/fault_spec.h"

#include <atomic>
#include <string>

#include "absl/synchronization/notification.h"
#include "common/fault/delay_queue.h"
#include "gtest/gtest.h"

namespace zeroshard::fault {
namespace {

TEST(FaultSpecTest, ParsesEveryKindOfTerm) {
  auto spec = ParseFaultSpec(
      " seed=7, drop=0.05,dup=0.05 ,delay=0.05:20ms,fail=0.01:UNAVAILABLE,"
      "lose_at=CommitStep#3,fail_at=AllReduce#2,delay_at=Gather#1:1.5s,"
      "only=PushGradients|CommitStep",
      Side::kWorker);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->seed, 7u);
  ASSERT_EQ(spec->random.size(), 4u);
  EXPECT_EQ(spec->random[0].fault.action, Action::kDrop);
  EXPECT_DOUBLE_EQ(spec->random[0].probability, 0.05);
  EXPECT_EQ(spec->random[2].fault.action, Action::kDelay);
  EXPECT_EQ(spec->random[2].fault.delay, absl::Milliseconds(20));
  EXPECT_EQ(spec->random[3].fault.code, absl::StatusCode::kUnavailable);
  ASSERT_EQ(spec->points.size(), 3u);
  EXPECT_EQ(spec->points[0].name, "CommitStep");
  EXPECT_EQ(spec->points[0].nth, 3u);
  EXPECT_EQ(spec->points[0].fault.action, Action::kLose);
  EXPECT_EQ(spec->points[1].fault.code, absl::StatusCode::kInternal);
  EXPECT_EQ(spec->points[2].fault.delay, absl::Milliseconds(1500));
  EXPECT_EQ(spec->only,
            (std::vector<std::string>{"PushGradients", "CommitStep"}));
  auto empty = ParseFaultSpec("  ", Side::kServer);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

// Every bad term gets INVALID_ARGUMENT naming the term and the problem.
TEST(FaultSpecTest, BadTermsNameTheTermAndTheProblem) {
  struct Case {
    const char* spec;
    Side side;
    const char* want;  // a part of the message
  };
  const Case cases[] = {
      {"drop", Side::kWorker, "'drop': expected key=value"},
      {"drip=0.1", Side::kWorker, "unknown key 'drip'"},
      {"drop=1.5", Side::kWorker, "not a number in [0, 1]"},
      {"drop=x", Side::kWorker, "not a number in [0, 1]"},
      {"drop=0.6,dup=0.5", Side::kWorker, "'dup=0.5': the probabilities"},
      {"delay=0.1", Side::kWorker, "needs a duration"},
      {"delay=0.1:20 parsecs", Side::kWorker, "not a duration"},
      {"fail=0.1:OOPS", Side::kWorker, "'OOPS' is not a status code"},
      {"drop=0.1:5ms", Side::kWorker, "drop takes no ':'"},
      {"seed=-1", Side::kWorker, "seed is not an unsigned integer"},
      {"lose_at=CommitStep", Side::kWorker, "expected NAME#N"},
      {"lose_at=CommitStep#0", Side::kWorker, "integer >= 1"},
      {"lose_at=Comit#3", Side::kWorker, "unknown name 'Comit' (RPCs: "},
      {"lose_at=AllReduce#3", Side::kWorker, "can only fail or be delayed"},
      {"drop=0.1,only=Barrier", Side::kWorker, "can only fail or be delayed"},
      {"drop=0.1", Side::kServer, "'drop=0.1': a server cannot drop"},
      {"fail_at=CommitStep#2", Side::kServer, "a server cannot fail"},
      {"delay_at=Barrier#1:1ms", Side::kServer, "runs no collectives"},
      {"only=Nope", Side::kWorker, "unknown name 'Nope'"},
      {"drop=0.1,,dup=0.1", Side::kWorker, "has an empty term"},
  };
  for (const Case& c : cases) {
    auto spec = ParseFaultSpec(c.spec, c.side);
    ASSERT_FALSE(spec.ok()) << c.spec;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(spec.status().message().find(c.want), std::string::npos)
        << c.spec << " -> " << spec.status().message();
  }
}

TEST(FaultSpecTest, FlagWinsOverTheEnvironment) {
  setenv("ZEROSHARD_TEST_FAULTS", "lose=0.5", 1);
  auto from_env =
      FaultSpecFromFlagOrEnv("", "ZEROSHARD_TEST_FAULTS", Side::kServer);
  ASSERT_TRUE(from_env.ok()) << from_env.status();
  EXPECT_EQ(from_env->random.size(), 1u);
  auto from_flag =
      FaultSpecFromFlagOrEnv("seed=3", "ZEROSHARD_TEST_FAULTS", Side::kServer);
  ASSERT_TRUE(from_flag.ok());
  EXPECT_TRUE(from_flag->empty());
  setenv("ZEROSHARD_TEST_FAULTS", "drop=0.5", 1);
  auto bad = FaultSpecFromFlagOrEnv("", "ZEROSHARD_TEST_FAULTS", Side::kServer);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message().rfind("ZEROSHARD_TEST_FAULTS: ", 0), 0u);
  unsetenv("ZEROSHARD_TEST_FAULTS");
}

TEST(FaultInjectorTest, PointFaultsHitExactlyTheNthCall) {
  auto spec = ParseFaultSpec("lose_at=CommitStep#3,fail_at=AllReduce#2:ABORTED",
                             Side::kWorker);
  ASSERT_TRUE(spec.ok());
  FaultInjector inj(*spec);
  for (int i = 1; i <= 5; ++i) {
    EXPECT_EQ(inj.Next("PushGradients").fault.action, Action::kNone);
    const Decision d = inj.Next("CommitStep");
    EXPECT_EQ(d.fault.action, i == 3 ? Action::kLose : Action::kNone) << i;
    if (i == 3) {
      EXPECT_EQ(d.reason, "lose_at=CommitStep#3");
    }
    const Decision c = inj.Next("AllReduce");
    EXPECT_EQ(c.fault.action, i == 2 ? Action::kFail : Action::kNone) << i;
    if (i == 2) {
      EXPECT_EQ(c.fault.code, absl::StatusCode::kAborted);
    }
  }
  EXPECT_EQ(inj.counts().calls, 15u);
  EXPECT_EQ(inj.counts().lose, 1u);
  EXPECT_EQ(inj.counts().fail, 1u);
}

// Random faults hit about the requested fraction, only eligible names, and
// the same calls for the same seed.
TEST(FaultInjectorTest, RandomFaultsFollowTheProbabilitiesAndTheSeed) {
  auto spec = ParseFaultSpec("seed=9,drop=0.1,dup=0.2", Side::kWorker);
  ASSERT_TRUE(spec.ok());
  FaultInjector a(*spec), b(*spec);
  std::string pattern_a, pattern_b;
  for (int i = 0; i < 10000; ++i) {
    pattern_a += ActionName(a.Next("Gather").fault.action)[1];
    pattern_b += ActionName(b.Next("Gather").fault.action)[1];
    EXPECT_EQ(a.Next("AllReduce").fault.action, Action::kNone);
    b.Next("AllReduce");
  }
  EXPECT_EQ(pattern_a, pattern_b);
  const FaultInjector::Counts c = a.counts();
  EXPECT_GT(c.drop, 800u);
  EXPECT_LT(c.drop, 1200u);
  EXPECT_GT(c.dup, 1700u);
  EXPECT_LT(c.dup, 2300u);
  EXPECT_EQ(c.lose + c.fail + c.delay, 0u);
  EXPECT_EQ(a.Summary(), "fault injection: 20000 calls; drop " +
                             std::to_string(c.drop) + ", fail 0, lose 0, dup " +
                             std::to_string(c.dup) + ", delay 0");
  auto other = ParseFaultSpec("seed=10,drop=0.1,dup=0.2", Side::kWorker);
  FaultInjector d(*other);
  std::string pattern_d;
  for (int i = 0; i < 10000; ++i) {
    pattern_d += ActionName(d.Next("Gather").fault.action)[1];
    d.Next("AllReduce");
  }
  EXPECT_NE(pattern_a, pattern_d);
}

TEST(FaultInjectorTest, OnlyRestrictsRandomFaults) {
  auto spec =
      ParseFaultSpec("delay=1:1ms,only=AllReduce|CommitStep", Side::kWorker);
  ASSERT_TRUE(spec.ok()) << spec.status();
  FaultInjector inj(*spec);
  EXPECT_EQ(inj.Next("AllReduce").fault.action, Action::kDelay);
  EXPECT_EQ(inj.Next("CommitStep").fault.action, Action::kDelay);
  EXPECT_EQ(inj.Next("Gather").fault.action, Action::kNone);
  EXPECT_EQ(inj.Next("Barrier").fault.action, Action::kNone);
}

TEST(DelayQueueTest, RunsInDueOrderAndFlushesOnDestruction) {
  std::string order;
  absl::Mutex mu;
  absl::Notification second;
  {
    DelayQueue q;
    q.RunAfter(absl::Milliseconds(30), [&] {
      absl::MutexLock l(&mu);
      order += "b";
      second.Notify();
    });
    q.RunAfter(absl::Milliseconds(1), [&] {
      absl::MutexLock l(&mu);
      order += "a";
    });
    second.WaitForNotification();
    q.RunAfter(absl::Hours(1), [&] {
      absl::MutexLock l(&mu);
      order += "c";  // run by the destructor
    });
  }
  EXPECT_EQ(order, "abc");
}

}  // namespace
}  // namespace zeroshard::fault
