// Issue 23 item 10: slow HTTP clients cannot block a real zeroshard-server's
// metrics endpoint (--metrics_port). Clients that send a partial request
// line and stall, one that sends nothing and two that trickle a byte every
// 200 ms hold connections while ten ordinary scrapes run: every scrape is
// served (HTTP 200 and metric text), and the server closes the slow
// connections itself once their request-head deadline passes.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "common/env/env.h"
#include "fleet/local_fleet.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "tests/testing.h"

namespace zeroshard {
namespace {

using Clock = std::chrono::steady_clock;

// The metrics port the server printed to its log (polls for up to 60 s).
int MetricsPort(const std::string& log) {
  const std::string key = "metrics on http://127.0.0.1:";
  for (auto until = Clock::now() + std::chrono::seconds(60);
       Clock::now() < until;) {
    auto text = ReadSmallFile(DefaultEnv(), log);
    if (text.ok()) {
      const size_t at = text->find(key);
      const size_t end = at == std::string::npos
                             ? std::string::npos
                             : text->find('/', at + key.size());
      int port = 0;
      if (end != std::string::npos &&
          absl::SimpleAtoi(text->substr(at + key.size(), end - at - key.size()),
                           &port)) {
        return port;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

// A connected TCP socket to 127.0.0.1:port, or -1.
int Dial(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
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

// True once the peer closed `fd` (EOF or reset), waiting up to `limit`.
bool ClosedByPeer(int fd, std::chrono::seconds limit) {
  for (auto until = Clock::now() + limit; Clock::now() < until;) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) == 1) {
      char buf[256];
      const ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (n <= 0) return true;
    }
  }
  return false;
}

TEST(MetricsSlowClientsTest, ScrapesAreServedWhileSlowClientsHoldConnections) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/slow_metrics";
  mkdir(dir.c_str(), 0700);
  auto fleet = testing::StartFleet(1, {"--metrics_port=0"}, dir);
  ASSERT_NE(fleet, nullptr);
  const int port = MetricsPort(dir + "/server-0.log");
  ASSERT_GT(port, 0) << "no metrics line in " << dir << "/server-0.log";

  // Four clients send part of a request line and stall; one sends nothing.
  std::vector<int> stalled;
  for (int i = 0; i < 5; ++i) {
    const int fd = Dial(port);
    ASSERT_GE(fd, 0);
    if (i < 4) {
      ASSERT_EQ(send(fd, "GET /metr", 9, MSG_NOSIGNAL), 9);
    }
    stalled.push_back(fd);
  }
  // Two more trickle a header byte every 200 ms and never finish.
  std::atomic<bool> stop{false};
  std::vector<int> tricklers = {Dial(port), Dial(port)};
  std::thread trickle([&] {
    for (int i = 0; !stop.load(); ++i) {
      for (int fd : tricklers) {
        (void)send(fd, i == 0 ? "GET /metrics HTTP/1.1\r\nX: " : "a",
                   i ? 1 : 26, MSG_NOSIGNAL | MSG_DONTWAIT);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });

  int served = 0;
  std::string failures;
  for (int i = 0; i < 10; ++i) {
    httplib::Client client("127.0.0.1", port);
    client.set_connection_timeout(30);
    client.set_read_timeout(30);
    client.set_write_timeout(30);
    auto res = client.Get("/metrics");
    if (res && res->status == 200 &&
        res->body.find("process_resident_memory_bytes") != std::string::npos) {
      ++served;
    } else {
      failures += " scrape " + std::to_string(i) + ": " +
                  (res ? "HTTP " + std::to_string(res->status)
                       : httplib::to_string(res.error())) +
                  ";";
      if (!res) break;  // each failure took the whole timeout
    }
  }
  EXPECT_EQ(served, 10) << "of 10 scrapes;" << failures;

  // The server ends the slow connections itself (a request-head deadline
  // of a few seconds, not a per-byte one).
  for (int fd : stalled)
    EXPECT_TRUE(ClosedByPeer(fd, std::chrono::seconds(60)));
  for (int fd : tricklers) {
    EXPECT_TRUE(ClosedByPeer(fd, std::chrono::seconds(60)));
  }
  stop = true;
  trickle.join();
  for (int fd : stalled) close(fd);
  for (int fd : tricklers) close(fd);
}

}  // namespace
}  // namespace zeroshard
