#include "common/metrics/http_exporter.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"

namespace zeroshard::metrics {
namespace {

TEST(HttpExporterTest, ServesMetricsHealthAndNotFound) {
  Registry registry;
  Counter* scrapes = registry.GetCounter("test_scrapes_total", "Scrapes.");
  registry.AddCollector([&] { scrapes->Add(1); });
  auto http = HttpExporter::Start("127.0.0.1", 0, &registry);
  ASSERT_TRUE(http.ok()) << http.status();
  ASSERT_GT((*http)->port(), 0);
  EXPECT_EQ((*http)->address(), "127.0.0.1:" + std::to_string((*http)->port()));

  httplib::Client client("127.0.0.1", (*http)->port());
  for (int i = 1; i <= 2; ++i) {
    auto res = client.Get("/metrics");
    ASSERT_TRUE(res) << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 200);
    EXPECT_EQ(res->get_header_value("Content-Type"),
              "text/plain; version=0.0.4; charset=utf-8");
    EXPECT_THAT(res->body, ::testing::HasSubstr("test_scrapes_total " +
                                                std::to_string(i) + "\n"));
  }
  auto health = client.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body, "ok\n");
  auto missing = client.Get("/nothing");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
}

TEST(HttpExporterTest, RefusesABusyPortAndBadPorts) {
  Registry registry;
  auto first = HttpExporter::Start("127.0.0.1", 0, &registry);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = HttpExporter::Start("127.0.0.1", (*first)->port(), &registry);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(
      std::string(second.status().message()),
      ::testing::HasSubstr("127.0.0.1:" + std::to_string((*first)->port())));
  EXPECT_EQ(HttpExporter::Start("127.0.0.1", 70000, &registry).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(HttpExporterTest, StopsPromptlyWhenDestroyed) {
  Registry registry;
  for (int i = 0; i < 3; ++i) {
    auto http = HttpExporter::Start("127.0.0.1", 0, &registry);
    ASSERT_TRUE(http.ok()) << http.status();
  }  // each destructor joins its thread; a hang fails by timeout
}

}  // namespace
}  // namespace zeroshard::metrics
