#include "common/metrics/http_exporter.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"

namespace zeroshard::metrics {
namespace {

using Clock = std::chrono::steady_clock;

// A TCP connection to 127.0.0.1:port (a receive buffer of `rcvbuf` bytes
// when > 0), or -1.
int Dial(int port, int rcvbuf = 0) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (rcvbuf > 0) {
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Everything the server sends on `fd` until it closes (or 60 s pass);
// "<reset>" appended when it resets the connection.
std::string ReadToClose(int fd) {
  std::string out;
  for (auto until = Clock::now() + std::chrono::seconds(60);
       Clock::now() < until;) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) != 1) continue;
    char buf[4096];
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n == 0) return out;
    if (n < 0) return out + "<reset>";
    out.append(buf, static_cast<size_t>(n));
  }
  return out + "<still open>";
}

// Sends `request` on a new connection and returns the whole answer.
std::string Exchange(int port, const std::string& request) {
  const int fd = Dial(port);
  if (fd < 0) return "<no connection>";
  send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string out = ReadToClose(fd);
  close(fd);
  return out;
}

// A scrape with generous timeouts: true if answered 200 with the metric.
bool Scraped(int port, const std::string& metric) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(30);
  client.set_read_timeout(30);
  auto res = client.Get("/metrics");
  return res && res->status == 200 &&
         res->body.find(metric) != std::string::npos;
}

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

TEST(HttpExporterTest, AnswersHeadBadRequestsAndOtherMethods) {
  Registry registry;
  registry.GetGauge("test_gauge", "A gauge.")->Set(3);
  auto http = HttpExporter::Start("127.0.0.1", 0, &registry);
  ASSERT_TRUE(http.ok()) << http.status();
  const int port = (*http)->port();
  const std::string head =
      Exchange(port, "HEAD /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n");
  EXPECT_THAT(head, ::testing::StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(head, ::testing::HasSubstr("Connection: close\r\n"));
  EXPECT_THAT(head, ::testing::EndsWith("\r\n\r\n"));  // no body
  EXPECT_THAT(Exchange(port, "GET /healthz HTTP/1.0\n\n"),
              ::testing::EndsWith("\r\n\r\nok\n"));
  EXPECT_THAT(Exchange(port, "POST /metrics HTTP/1.1\r\n\r\n"),
              ::testing::StartsWith("HTTP/1.1 405 "));
  EXPECT_THAT(Exchange(port, "GET /metrics\r\n\r\n"),
              ::testing::StartsWith("HTTP/1.1 400 "));
  EXPECT_THAT(Exchange(port, "\x01\x02\x03 \xff\r\n\r\n"),
              ::testing::StartsWith("HTTP/1.1 400 "));
  EXPECT_THAT(
      Exchange(port, "GET /metrics HTTP/1.1\r\nX: " + std::string(20000, 'a')),
      ::testing::StartsWith("HTTP/1.1 431 "));
  EXPECT_TRUE(Scraped(port, "test_gauge 3"));
}

TEST(HttpExporterTest, SlowClientsTimeOutAndNeverBlockScrapes) {
  Registry registry;
  registry.GetGauge("test_gauge", "A gauge.")->Set(1);
  HttpExporterOptions options;
  options.head_timeout = absl::Milliseconds(300);
  auto http = HttpExporter::Start("127.0.0.1", 0, &registry, options);
  ASSERT_TRUE(http.ok()) << http.status();
  const int port = (*http)->port();
  std::vector<int> slow;
  for (int i = 0; i < 6; ++i) {
    slow.push_back(Dial(port));
    ASSERT_GE(slow.back(), 0);
    if (i % 2 == 0) send(slow.back(), "GET /met", 8, MSG_NOSIGNAL);
  }
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(Scraped(port, "test_gauge 1"));
  // Each slow connection is closed unanswered after the head deadline.
  for (int fd : slow) {
    EXPECT_EQ(ReadToClose(fd), "");
    close(fd);
  }
}

TEST(HttpExporterTest, AtTheConnectionLimitTheOldestIsClosed) {
  Registry registry;
  registry.GetGauge("test_gauge", "A gauge.")->Set(2);
  HttpExporterOptions options;
  options.max_connections = 3;
  options.head_timeout = absl::Seconds(600);  // only eviction closes them
  auto http = HttpExporter::Start("127.0.0.1", 0, &registry, options);
  ASSERT_TRUE(http.ok()) << http.status();
  std::vector<int> idle;
  for (int i = 0; i < 10; ++i) {
    idle.push_back(Dial((*http)->port()));
    ASSERT_GE(idle.back(), 0);
  }
  EXPECT_TRUE(Scraped((*http)->port(), "test_gauge 2"));
  // The scrape's connection closed the oldest ones on its way in.
  EXPECT_EQ(ReadToClose(idle[0]), "");
  for (int fd : idle) close(fd);
}

TEST(HttpExporterTest, AClientThatNeverReadsIsClosedAfterTheWriteDeadline) {
  Registry registry;
  // Far more text than the socket buffers of a client that never reads
  // hold.
  constexpr size_t kBig = size_t{16} << 20;
  Gauge* big = registry.GetGauge("test_big", std::string(kBig, 'h'));
  big->Set(1);
  HttpExporterOptions options;
  options.write_timeout = absl::Milliseconds(300);
  auto http = HttpExporter::Start("127.0.0.1", 0, &registry, options);
  ASSERT_TRUE(http.ok()) << http.status();
  std::vector<int> stuck;
  for (int i = 0; i < 4; ++i) {
    stuck.push_back(Dial((*http)->port(), 4096));
    ASSERT_GE(stuck.back(), 0);
    send(stuck.back(), "GET /metrics HTTP/1.1\r\n\r\n", 27, MSG_NOSIGNAL);
  }
  EXPECT_TRUE(Scraped((*http)->port(), "test_big 1"));
  // Read only once the server has given up on all four: a client that
  // began reading before its deadline would rightly get everything.
  for (auto until = Clock::now() + std::chrono::seconds(60);
       (*http)->responses_cut() < 4 && Clock::now() < until;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GE((*http)->responses_cut(), 4);
  for (int fd : stuck) {
    // Cut off: far less than the whole answer, then the close.
    EXPECT_LT(ReadToClose(fd).size(), kBig);
    close(fd);
  }
}

}  // namespace
}  // namespace zeroshard::metrics
