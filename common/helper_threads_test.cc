#include "common/helper_threads.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <set>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace zeroshard {
namespace {

// Waits up to 20 s for `done`; false if it never held.
template <typename F>
bool Eventually(F done) {
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (!done()) {
    if (absl::Now() > give_up) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

TEST(HelperThreadsTest, RunsEveryItemExactlyOnce) {
  HelperThreads pool({});
  for (size_t parallel : {size_t{1}, size_t{2}, size_t{5}, SIZE_MAX}) {
    for (size_t n : {0u, 1u, 2u, 3u, 17u, 1000u}) {
      std::vector<std::atomic<int>> hits(n);
      pool.Run(
          n, [&](size_t i) { hits[i].fetch_add(1); }, parallel);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << i;
    }
  }
}

TEST(HelperThreadsTest, AtMostParallelAtOnce) {
  HelperThreads pool({});
  std::atomic<int> now{0}, most{0};
  pool.Run(
      12,
      [&](size_t) {
        const int k = now.fetch_add(1) + 1;
        for (int m = most.load(); k > m && !most.compare_exchange_weak(m, k);) {
        }
        absl::SleepFor(absl::Milliseconds(2));
        now.fetch_sub(1);
      },
      3);
  EXPECT_LE(most.load(), 3);
}

// The point of the pool: a client fanning out every step starts its
// helpers once, not once per call.
TEST(HelperThreadsTest, IdleHelpersAreReused) {
  HelperThreads pool({});
  for (int call = 0; call < 50; ++call) {
    pool.Run(4, [](size_t) { absl::SleepFor(absl::Microseconds(200)); });
    // Every helper back to waiting before the next call (without it a
    // call may find one still on its way back, and start another).
    ASSERT_TRUE(Eventually([&] { return pool.idle() == pool.live(); }));
  }
  // Three helpers at most were ever needed at once (a call whose helper
  // came back quickly may have needed fewer); before the pool, 150.
  EXPECT_GE(pool.threads_started(), 1);
  EXPECT_LE(pool.threads_started(), 3);
  EXPECT_EQ(pool.live(), pool.threads_started());
}

TEST(HelperThreadsTest, HelpersIdleTooLongExit) {
  HelperThreads::Options o;
  o.keep_alive = absl::Milliseconds(20);
  HelperThreads pool(o);
  pool.Run(3, [](size_t) {});
  EXPECT_TRUE(Eventually([&] { return pool.live() == 0; }));
  // And new ones start when needed again.
  std::atomic<int> sum{0};
  pool.Run(3, [&](size_t i) { sum += static_cast<int>(i) + 1; });
  EXPECT_EQ(sum.load(), 6);
}

// Where no thread can be started (thread limits), the caller's thread
// does every item: the call neither fails nor aborts.
TEST(HelperThreadsTest, WithoutThreadsTheCallerDoesEverything) {
  HelperThreads::Options o;
  std::atomic<int> tries{0};
  o.start_thread = [&](std::function<void()>) {
    ++tries;
    return false;
  };
  HelperThreads pool(o);
  std::set<std::thread::id> who;
  absl::Mutex mu;
  std::vector<int> hits(9, 0);
  pool.Run(9, [&](size_t i) {
    absl::MutexLock l(&mu);
    who.insert(std::this_thread::get_id());
    ++hits[i];
  });
  EXPECT_EQ(who, std::set<std::thread::id>{std::this_thread::get_id()});
  EXPECT_EQ(hits, std::vector<int>(9, 1));
  EXPECT_EQ(tries.load(), 1);  // gave up after the first refusal
  EXPECT_EQ(pool.threads_started(), 0);
  EXPECT_EQ(pool.live(), 0);
}

TEST(HelperThreadsTest, SomeThreadsThenNone) {
  HelperThreads::Options o;
  std::atomic<int> granted{0};
  o.start_thread = [&](std::function<void()> body) {
    if (granted.fetch_add(1) >= 2) return false;
    std::thread(std::move(body)).detach();
    return true;
  };
  {
    HelperThreads pool(o);
    std::vector<std::atomic<int>> hits(40);
    for (int call = 0; call < 20; ++call) {
      pool.Run(40, [&](size_t i) {
        hits[i].fetch_add(1);
        absl::SleepFor(absl::Microseconds(50));
      });
    }
    for (auto& h : hits) EXPECT_EQ(h.load(), 20);
    EXPECT_LE(pool.threads_started(), 2);
  }  // the destructor waits for the two helpers to stop
}

TEST(HelperThreadsTest, NestedRunsComplete) {
  HelperThreads pool({});
  std::atomic<int> sum{0};
  pool.Run(4, [&](size_t i) {
    pool.Run(3, [&](size_t j) { sum += static_cast<int>(10 * i + j); });
  });
  // sum over i < 4, j < 3 of 10i + j = 10 * 6 * 3 + 3 * 4 = 192
  EXPECT_EQ(sum.load(), 192);
}

TEST(HelperThreadsTest, ManyCallersAtOnce) {
  HelperThreads pool({});
  std::atomic<uint64_t> sum{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int call = 0; call < 200; ++call) {
        pool.Run(5, [&](size_t i) { sum += i + 1; });
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(sum.load(), 4u * 200u * 15u);
}

TEST(HelperThreadsTest, AsyncReturnsTheResult) {
  HelperThreads pool({});
  std::future<int> a = pool.Async([] { return 6 * 7; });
  std::future<void> b = pool.Async([] {});
  EXPECT_EQ(a.get(), 42);
  b.wait();
  // A helper of an earlier call is reused.
  ASSERT_TRUE(Eventually([&] { return pool.idle() == pool.live(); }));
  const int64_t started = pool.threads_started();
  EXPECT_EQ(pool.Async([] { return 1; }).get(), 1);
  EXPECT_EQ(pool.threads_started(), started);
}

TEST(HelperThreadsTest, AsyncWithoutThreadsRunsOnTheCaller) {
  HelperThreads::Options o;
  o.start_thread = [](std::function<void()>) { return false; };
  HelperThreads pool(o);
  std::thread::id ran_on;
  std::future<int> f = pool.Async([&] {
    ran_on = std::this_thread::get_id();
    return 5;
  });
  EXPECT_EQ(f.wait_for(std::chrono::seconds(0)), std::future_status::ready);
  EXPECT_EQ(f.get(), 5);
  EXPECT_EQ(ran_on, std::this_thread::get_id());
}

TEST(HelperThreadsTest, DefaultIsOnePoolPerProcess) {
  HelperThreads& a = HelperThreads::Default();
  EXPECT_EQ(&a, &HelperThreads::Default());
  a.Run(3, [](size_t) {});
  // A child of fork() has none of the parent's helpers: its Default() is
  // a pool of its own that works.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(20);  // a hang shows as a signal, not a stuck test
    HelperThreads& c = HelperThreads::Default();
    std::atomic<int> sum{0};
    c.Run(4, [&](size_t i) { sum += static_cast<int>(i) + 1; });
    _exit(&c != &a && sum.load() == 10 && c.threads_started() >= 1 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status))
      << "child ended by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace zeroshard
