#include "common/quiet_port.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/env/env.h"
#include "gtest/gtest.h"

namespace zeroshard {
namespace {

TEST(EphemeralRangeTest, ReadsTheKernelsTwoNumbers) {
  EXPECT_EQ(EphemeralRange("32768\t60999\n"), std::make_pair(32768, 60999));
  EXPECT_EQ(EphemeralRange("40000 50000"), std::make_pair(40000, 50000));
}

TEST(EphemeralRangeTest, FallsBackToLinuxDefaultOnNonsense) {
  const std::pair<int, int> linux_default{32768, 60999};
  EXPECT_EQ(EphemeralRange(""), linux_default);
  EXPECT_EQ(EphemeralRange("50000 40000"), linux_default);  // out of order
  EXPECT_EQ(EphemeralRange("0 100"), linux_default);
  EXPECT_EQ(EphemeralRange("1 70000"), linux_default);
  EXPECT_EQ(EphemeralRange("abc def"), linux_default);
}

// A socket listening on 127.0.0.1:port (the caller closes it), or -1.
int Listen(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      listen(fd, 1) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

TEST(QuietPortTest, PairIsBindableAndBelowTheEphemeralRange) {
  absl::StatusOr<std::string> text =
      ReadSmallFile(DefaultEnv(), "/proc/sys/net/ipv4/ip_local_port_range");
  const int first = EphemeralRange(text.ok() ? *text : "").first;
  for (int round = 0; round < 20; ++round) {
    absl::StatusOr<int> p = QuietPort(2);
    ASSERT_TRUE(p.ok()) << p.status();
    if (first - 10000 >= 1024) {
      EXPECT_GE(*p, first - 10000);
      EXPECT_LT(*p + 1, first);
    }
    // Both ports can be listened on now (nothing in this test holds them).
    const int a = Listen(*p), b = Listen(*p + 1);
    EXPECT_GE(a, 0) << *p;
    EXPECT_GE(b, 0) << *p + 1;
    if (a >= 0) close(a);
    if (b >= 0) close(b);
  }
}

}  // namespace
}  // namespace zeroshard
