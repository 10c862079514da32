#include "server/optim/parallel.h"

#include <atomic>
#include <cstddef>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace zeroshard {
namespace optim {
namespace {

// Every index is visited exactly once, by tiles aligned to kTileAlign.
void CheckCoverage(TilePool& pool, size_t n, size_t tile) {
  std::vector<std::atomic<int>> hits(n);
  std::mutex mu;
  std::set<std::thread::id> ids;
  std::vector<std::pair<size_t, size_t>> tiles;
  pool.Run(n, tile, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) hits[i].fetch_add(1);
    std::lock_guard<std::mutex> lock(mu);
    tiles.emplace_back(b, e);
    ids.insert(std::this_thread::get_id());
  });
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << i;
  for (const auto& t : tiles) {
    EXPECT_EQ(t.first % kTileAlign, 0u);
    EXPECT_LT(t.first, t.second);
    if (t.second != n) {
      EXPECT_EQ(t.second % kTileAlign, 0u);
    }
  }
  EXPECT_LE(ids.size(), static_cast<size_t>(pool.threads()));
}

TEST(TilePoolTest, CoversRangeOnce) {
  for (int threads : {1, 2, 4}) {
    TilePool pool(threads);
    EXPECT_EQ(pool.threads(), threads);
    for (size_t n : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{65},
                     size_t{1000}, size_t{100003}}) {
      for (size_t tile :
           {size_t{0}, size_t{1}, size_t{64}, size_t{100}, size_t{4096}}) {
        CheckCoverage(pool, n, tile);
      }
    }
  }
}

TEST(TilePoolTest, ManyRunsAndConcurrentCallers) {
  TilePool pool(3);
  std::atomic<size_t> sum{0};
  auto body = [&] {
    for (int r = 0; r < 200; ++r) {
      pool.Run(10000, 64, [&](size_t b, size_t e) { sum.fetch_add(e - b); });
    }
  };
  std::thread a(body), b(body);
  a.join();
  b.join();
  EXPECT_EQ(sum.load(), size_t{2} * 200 * 10000);
}

TEST(TilePoolTest, ParallelForUsesThreads) {
  std::mutex mu;
  std::set<std::thread::id> ids;
  std::atomic<size_t> count{0};
  ParallelFor(1 << 16, 64, 2, [&](size_t b, size_t e) {
    count.fetch_add(e - b);
    std::lock_guard<std::mutex> lock(mu);
    ids.insert(std::this_thread::get_id());
  });
  EXPECT_EQ(count.load(), size_t{1} << 16);
  EXPECT_GE(ids.size(), 1u);
  EXPECT_LE(ids.size(), 2u);
}

}  // namespace
}  // namespace optim
}  // namespace zeroshard
