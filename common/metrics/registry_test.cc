#include "common/metrics/registry.h"

#include <cmath>
#include <limits>
#include <string>

#include "common/metrics/process_metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace zeroshard::metrics {
namespace {

using ::testing::HasSubstr;

TEST(RegistryTest, RendersFamiliesSortedWithHelpAndType) {
  Registry r;
  r.GetGauge("b_gauge", "A gauge.")->Set(2.5);
  r.GetCounter("a_total", "A counter.", {{"kind", "x"}})->Add(3);
  r.GetCounter("a_total", "A counter.", {{"kind", "y"}})->Add(1);
  r.GetCounter("a_total", "A counter.", {{"kind", "x"}})->Add(4);
  EXPECT_EQ(r.Render(),
            "# HELP a_total A counter.\n"
            "# TYPE a_total counter\n"
            "a_total{kind=\"x\"} 7\n"
            "a_total{kind=\"y\"} 1\n"
            "# HELP b_gauge A gauge.\n"
            "# TYPE b_gauge gauge\n"
            "b_gauge 2.5\n");
}

TEST(RegistryTest, SameNameAndLabelsGiveTheSameChild) {
  Registry r;
  Gauge* a = r.GetGauge("g", "h", {{"a", "1"}});
  EXPECT_EQ(a, r.GetGauge("g", "h", {{"a", "1"}}));
  EXPECT_NE(a, r.GetGauge("g", "h", {{"a", "2"}}));
}

TEST(RegistryTest, HistogramBucketsAreCumulative) {
  Registry r;
  Histogram* h =
      r.GetHistogram("lat_seconds", "Latency.", {0.1, 1}, {{"m", "A"}});
  h->Observe(0.05);
  h->Observe(0.1);  // le is inclusive
  h->Observe(0.5);
  h->Observe(7);
  EXPECT_EQ(r.Render(),
            "# HELP lat_seconds Latency.\n"
            "# TYPE lat_seconds histogram\n"
            "lat_seconds_bucket{m=\"A\",le=\"0.1\"} 2\n"
            "lat_seconds_bucket{m=\"A\",le=\"1\"} 3\n"
            "lat_seconds_bucket{m=\"A\",le=\"+Inf\"} 4\n"
            "lat_seconds_sum{m=\"A\"} 7.65\n"
            "lat_seconds_count{m=\"A\"} 4\n");
}

TEST(RegistryTest, EscapesHelpAndLabelValues) {
  Registry r;
  r.GetGauge("g", "line\\one\nline two", {{"path", "a\"b\\c\nd"}})->Set(1);
  EXPECT_EQ(r.Render(),
            "# HELP g line\\\\one\\nline two\n"
            "# TYPE g gauge\n"
            "g{path=\"a\\\"b\\\\c\\nd\"} 1\n");
}

TEST(RegistryTest, CollectorsRunBeforeEveryRender) {
  Registry r;
  Gauge* g = r.GetGauge("scrapes", "Renders so far.");
  int n = 0;
  r.AddCollector([&] { g->Set(++n); });
  EXPECT_THAT(r.Render(), HasSubstr("scrapes 1\n"));
  EXPECT_THAT(r.Render(), HasSubstr("scrapes 2\n"));
}

TEST(RegistryTest, FormatsValuesLikePrometheus) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(-12), "-12");
  EXPECT_EQ(FormatValue(1e12), "1000000000000");
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(1.0 / 3), "0.3333333333333333");
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
  EXPECT_EQ(std::stod(FormatValue(6.02e23)), 6.02e23);
}

TEST(RegistryDeathTest, RejectsBadNamesAndTypeClashes) {
  Registry r;
  EXPECT_DEATH(r.GetGauge("1bad", "h"), "invalid metric name '1bad'");
  EXPECT_DEATH(r.GetGauge("ok", "h", {{"le", "1"}}), "invalid label name 'le'");
  r.GetGauge("twice", "h");
  EXPECT_DEATH(r.GetCounter("twice", "h"), "registered with two types");
}

TEST(ProcessMetricsTest, ParsesProcStat) {
  // A real line's shape, with a comm holding spaces and ')'.
  const std::string stat =
      "4242 (zeroshard (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 "
      "250 150 0 0 20 0 7 0 500 1048576 300 18446744073709551615";
  auto s = ParseProcStat(stat, 4096, 100, 1000);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->cpu_seconds, 4.0);  // (250 + 150) / 100
  EXPECT_EQ(s->threads, 7);
  EXPECT_EQ(s->start_time_seconds, 1005);  // 1000 + 500 / 100
  EXPECT_EQ(s->virtual_bytes, 1048576);
  EXPECT_EQ(s->resident_bytes, 300 * 4096);
  EXPECT_FALSE(ParseProcStat("no paren", 4096, 100, 0).ok());
  EXPECT_FALSE(ParseProcStat("1 (a) S 1 2", 4096, 100, 0).ok());
}

TEST(ProcessMetricsTest, ReportsThisProcess) {
  Registry r;
  AddProcessMetrics(&r);
  const std::string text = r.Render();
  EXPECT_THAT(text, HasSubstr("# TYPE process_resident_memory_bytes gauge\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE process_cpu_seconds_total counter\n"));
  EXPECT_GT(r.GetGauge("process_resident_memory_bytes", "")->value(), 0);
  EXPECT_GE(r.GetGauge("process_threads", "")->value(), 1);
}

}  // namespace
}  // namespace zeroshard::metrics
