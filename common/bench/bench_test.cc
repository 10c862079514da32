#include "common/bench/bench.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace zeroshard {
namespace bench {
namespace {

TEST(BenchTest, MedianOfOddEvenAndNone) {
  EXPECT_EQ(Median({}), 0);
  EXPECT_EQ(Median({3}), 3);
  EXPECT_EQ(Median({5, 1, 3}), 3);
  EXPECT_EQ(Median({4, 1, 3, 2}), 2.5);
}

TEST(BenchTest, SummarizeGivesMedianMinMaxAndSpread) {
  const Summary s = Summarize({2, 8, 4});
  EXPECT_EQ(s.count, 3);
  EXPECT_EQ(s.median, 4);
  EXPECT_EQ(s.min, 2);
  EXPECT_EQ(s.max, 8);
  EXPECT_EQ(s.spread(), 1.5);
  EXPECT_EQ(Summarize({}).count, 0);
  EXPECT_EQ(Summarize({}).spread(), 0);
}

double RatioOfFirstTwo(const std::vector<double>& m) { return m[0] / m[1]; }

TEST(BenchTest, BootstrapOfConstantRunsIsThePointValue) {
  const Interval i =
      BootstrapMedians({{2, 2, 2}, {1, 1, 1, 1}}, RatioOfFirstTwo);
  EXPECT_EQ(i.value, 2);
  EXPECT_EQ(i.low, 2);
  EXPECT_EQ(i.high, 2);
}

TEST(BenchTest, BootstrapValueIsTheStatisticOfTheMedians) {
  const Interval i =
      BootstrapMedians({{30, 10, 20, 90}, {10, 5, 4}}, RatioOfFirstTwo);
  EXPECT_DOUBLE_EQ(i.value, 25.0 / 5.0);  // medians 25 and 5
  EXPECT_LE(i.low, i.value);
  EXPECT_GE(i.high, i.value);
}

TEST(BenchTest, BootstrapSeparatesDistinctRunsAndNotTheSameOnes) {
  std::vector<double> fast, slow, shuffled;
  for (int k = 0; k < 9; ++k) {
    fast.push_back(100 + (k * 7) % 9);  // 100..108
    slow.push_back(120 + (k * 5) % 9);  // 120..128
  }
  const Interval apart = BootstrapMedians({fast, slow}, RatioOfFirstTwo);
  EXPECT_LT(apart.high, 1.0);  // fast is surely faster
  EXPECT_GT(apart.low, 100.0 / 128.0 - 1e-12);
  shuffled.assign(fast.rbegin(), fast.rend());
  const Interval same = BootstrapMedians({fast, shuffled}, RatioOfFirstTwo);
  EXPECT_EQ(same.value, 1.0);
  EXPECT_LT(same.low, 1.0);  // the runs' scatter, both ways
  EXPECT_GT(same.high, 1.0);
}

TEST(BenchTest, BootstrapIsDeterministicAndNarrowsWithConfidence) {
  const std::vector<std::vector<double>> s = {{5, 7, 6, 9, 4, 8}, {6, 5, 7}};
  const Interval a = BootstrapMedians(s, RatioOfFirstTwo);
  const Interval b = BootstrapMedians(s, RatioOfFirstTwo);
  EXPECT_EQ(a.low, b.low);
  EXPECT_EQ(a.high, b.high);
  const Interval narrow = BootstrapMedians(s, RatioOfFirstTwo, 0.5);
  EXPECT_GE(narrow.low, a.low);
  EXPECT_LE(narrow.high, a.high);
  EXPECT_LT(narrow.high - narrow.low, a.high - a.low);
}

TEST(BenchTest, BootstrapOfAMissingVariantIsNan) {
  EXPECT_TRUE(
      std::isnan(BootstrapMedians({{1, 2}, {}}, RatioOfFirstTwo).value));
  const Interval n = BootstrapMedians(
      {{1, 2}}, [](const std::vector<double>&) { return std::nan(""); });
  EXPECT_TRUE(std::isnan(n.value));
  EXPECT_TRUE(std::isnan(n.low));
  EXPECT_TRUE(std::isnan(n.high));
}

TEST(BenchTest, AlternationOrderIsRoundRobin) {
  EXPECT_EQ(AlternationOrder(3, 2), (std::vector<int>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(AlternationOrder(1, 3), (std::vector<int>{0, 0, 0}));
  EXPECT_TRUE(AlternationOrder(2, 0).empty());
}

TEST(BenchTest, RunAlternatingAlternatesAndDropsWarmUps) {
  std::vector<std::string> calls;
  auto fake = [&](std::string name, double seconds) -> RunFn {
    return [&calls, name, seconds](const RunInfo& info) {
      calls.push_back(absl::StrCat(name, info.warmup ? "w" : "", info.round,
                                   info.last ? "!" : ""));
      return seconds + info.round;
    };
  };
  auto r = RunAlternating(
      {{"a", fake("a", 10), true}, {"b", fake("b", 5)}, {"c", fake("c", 20)}},
      Schedule{1, 3});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(calls,
            (std::vector<std::string>{"aw0", "bw0", "cw0", "a0", "b0", "c0",
                                      "a1", "b1", "c1", "a2!", "b2!", "c2!"}));
  EXPECT_EQ(r->Get("a").seconds, (std::vector<double>{10, 11, 12}));
  EXPECT_EQ(r->Median("b"), 6);
  EXPECT_EQ(r->Get("c").summary.max, 22);
  ASSERT_NE(r->reference(), nullptr);
  EXPECT_EQ(r->reference()->name, "a");
  EXPECT_DOUBLE_EQ(r->TimeVsReference("b"), 6.0 / 11);
  EXPECT_DOUBLE_EQ(r->SpeedVsReference("c"), 11.0 / 21);
  EXPECT_NE(r->Table("GB/s").find("a (ref)"), std::string::npos);
}

TEST(BenchTest, TimedAcceptsEveryCallableShape) {
  int n = 0;
  auto r = RunAlternating({{"void", Timed([&] { ++n; })},
                           {"info", Timed([&](const RunInfo&) { ++n; })},
                           {"status", Timed([&]() -> absl::Status {
                              ++n;
                              return absl::OkStatus();
                            })}},
                          Schedule{0, 2});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(n, 6);
  EXPECT_GE(r->Median("void"), 0);
  EXPECT_EQ(r->reference(), nullptr);
  EXPECT_EQ(r->TimeVsReference("void"), 0);
}

TEST(BenchTest, RunAlternatingStopsAtTheFirstErrorAndNamesTheVariant) {
  int later = 0;
  auto r = RunAlternating(
      {{"bad", Timed([] { return absl::DataLossError("wrong bits"); })},
       {"good", Timed([&] { ++later; })}},
      Schedule{1, 3});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(r.status().message(), "bad: wrong bits");
  EXPECT_EQ(later, 0);
}

TEST(BenchTest, RunAlternatingRejectsBadInput) {
  const RunFn run = Timed([] {});
  EXPECT_FALSE(RunAlternating({}, Schedule{}).ok());
  EXPECT_FALSE(RunAlternating({{"a", run}}, Schedule{0, 0}).ok());
  EXPECT_FALSE(RunAlternating({{"a", run}}, Schedule{-1, 1}).ok());
  EXPECT_FALSE(RunAlternating({{"a", run}, {"a", run}}, Schedule{}).ok());
  EXPECT_FALSE(
      RunAlternating({{"a", run, true}, {"b", run, true}}, Schedule{}).ok());
  EXPECT_FALSE(RunAlternating({{"a", nullptr}}, Schedule{}).ok());
}

TEST(BenchTest, FormatValueKeepsFourSignificantDigitsWithoutExponent) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(1), "1.000");
  EXPECT_EQ(FormatValue(1.23456), "1.235");
  EXPECT_EQ(FormatValue(12.3456), "12.35");
  EXPECT_EQ(FormatValue(1234.56), "1235");
  EXPECT_EQ(FormatValue(123456.7), "123457");
  EXPECT_EQ(FormatValue(0.00123456), "0.001235");
  EXPECT_EQ(FormatValue(-2.5), "-2.500");
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::quiet_NaN()), "nan");
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-inf");
}

TEST(BenchTest, ResultLineFormatsKeysAndValuesInOrder) {
  ResultLine line;
  line.Add("ratio", 0.5).AddInt("steps", 120).Add("bad key", 3);
  EXPECT_EQ(line.ToString(), "RESULT ratio=0.5000 steps=120 bad_key=3.000");
  EXPECT_EQ(ResultLine().ToString(), "RESULT");
}

TEST(BenchTest, PatternIsFiniteAndIndexDependent) {
  std::vector<float> p(1000);
  FillPattern(p.data(), p.size());
  for (float x : p) {
    ASSERT_TRUE(std::isfinite(x));
    ASSERT_LE(std::fabs(x), 1.0f);
  }
  EXPECT_NE(p[1], p[2]);
  EXPECT_EQ(p[7], PatternValue(7));
}

}  // namespace
}  // namespace bench
}  // namespace zeroshard
