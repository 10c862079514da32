#include "common/thread_pool.h"

#include <atomic>
#include <vector>

#include "gtest/gtest.h"

namespace zeroshard {
namespace {

TEST(ThreadPoolTest, RunsEveryItemExactlyOnce) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.threads(), threads);
    for (size_t n : {0u, 1u, 2u, 3u, 100u, 10000u}) {
      std::vector<std::atomic<int>> hits(n);
      pool.ParallelFor(n, [&](size_t i) { hits[i].fetch_add(1); });
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << i;
    }
  }
}

TEST(ThreadPoolTest, ManyBackToBackLoopsFromSeveralCallers) {
  ThreadPool pool(3);
  std::atomic<uint64_t> sum{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int loop = 0; loop < 500; ++loop) {
        pool.ParallelFor(7, [&](size_t i) { sum.fetch_add(i + 1); });
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(sum.load(), 4u * 500u * 28u);
}

}  // namespace
}  // namespace zeroshard
