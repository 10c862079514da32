// LocalFleet with real zeroshard-server processes: the ports it chooses lie
// below the kernel's ephemeral range, a restart keeps the port, a port
// taken before the server binds it is replaced at start and named at a
// restart.
#include "fleet/local_fleet.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/env/env.h"
#include "common/quiet_port.h"
#include "gtest/gtest.h"

namespace zeroshard {
namespace {

int PortOf(const std::string& address) {
  int port = 0;
  EXPECT_TRUE(absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port))
      << address;
  return port;
}

// A socket listening on 127.0.0.1:`port` (0: any) until destroyed. With
// SO_REUSEADDR, as a server binds: a connection of the killed server
// lingering in TIME_WAIT on that port does not stop it.
class Holder {
 public:
  explicit Holder(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    const int one = 1;
    if (fd_ >= 0) setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    ok_ = fd_ >= 0 &&
          bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
          listen(fd_, 1) == 0;
    socklen_t len = sizeof(a);
    if (ok_ && getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
      port_ = ntohs(a.sin_port);
    }
  }
  ~Holder() {
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return ok_; }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  bool ok_ = false;
  int port_ = 0;
};

class LocalFleetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto binary = WorkspaceBinary("server/zeroshard-server");
    ASSERT_TRUE(binary.ok()) << binary.status();
    options_.server_binary = *binary;
    options_.num_shards = 2;
    const char* tmp = std::getenv("TEST_TMPDIR");
    options_.work_dir = absl::StrCat(
        tmp != nullptr ? tmp : "/tmp", "/fleet-",
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_TRUE(DefaultEnv()->CreateDir(options_.work_dir).ok());
  }
  FleetOptions options_;
};

TEST_F(LocalFleetTest, PortsBelowTheEphemeralRangeKeptAcrossRestarts) {
  auto text =
      ReadSmallFile(DefaultEnv(), "/proc/sys/net/ipv4/ip_local_port_range");
  const auto [first, last] = EphemeralRange(text.ok() ? *text : "");
  auto fleet = LocalFleet::Start(options_);
  ASSERT_TRUE(fleet.ok()) << fleet.status();
  const std::vector<std::string> before = (*fleet)->addresses();
  ASSERT_EQ(before.size(), 2u);
  for (const std::string& a : before) {
    EXPECT_LT(PortOf(a), first)
        << a << " (ephemeral " << first << "-" << last << ")";
    EXPECT_GE(PortOf(a), 1024) << a;
  }
  EXPECT_NE(before[0], before[1]);
  ASSERT_TRUE((*fleet)->Restart(1).ok());
  EXPECT_EQ((*fleet)->addresses(), before);
  EXPECT_TRUE(CheckHealth(before[1], std::chrono::seconds(5)).ok());
  ASSERT_TRUE((*fleet)->Restart(0, std::chrono::seconds(10)).ok());
  EXPECT_TRUE(CheckHealth(before[0], std::chrono::seconds(5)).ok());
  EXPECT_TRUE((*fleet)->Stop(std::chrono::seconds(10)).ok());
}

TEST_F(LocalFleetTest, APortTakenBeforeTheServerBindsItIsReplaced) {
  Holder taken(0);
  ASSERT_TRUE(taken.ok());
  int calls = 0;
  options_.num_shards = 1;
  options_.choose_port = [&]() -> absl::StatusOr<int> {
    return ++calls == 1 ? taken.port() : QuietPort(1);
  };
  auto fleet = LocalFleet::Start(options_);
  ASSERT_TRUE(fleet.ok()) << fleet.status();
  EXPECT_EQ(calls, 2);
  EXPECT_NE(PortOf((*fleet)->addresses()[0]), taken.port());
  auto log = ReadSmallFile(DefaultEnv(), options_.work_dir + "/server-0.log");
  ASSERT_TRUE(log.ok());
  EXPECT_NE(
      log->find(absl::StrCat("cannot listen on 127.0.0.1:", taken.port())),
      std::string::npos)
      << *log;
}

TEST_F(LocalFleetTest, APortAlwaysTakenEndsTheStartNamingIt) {
  Holder taken(0);
  ASSERT_TRUE(taken.ok());
  int calls = 0;
  options_.num_shards = 1;
  options_.choose_port = [&]() -> absl::StatusOr<int> {
    ++calls;
    return taken.port();
  };
  auto fleet = LocalFleet::Start(options_);
  ASSERT_FALSE(fleet.ok());
  EXPECT_EQ(calls, 5);
  EXPECT_NE(fleet.status().message().find(
                absl::StrCat("cannot listen on 127.0.0.1:", taken.port())),
            std::string::npos)
      << fleet.status();
}

TEST_F(LocalFleetTest, ARestartWhosePortIsTakenSaysSo) {
  options_.num_shards = 1;
  auto fleet = LocalFleet::Start(options_);
  ASSERT_TRUE(fleet.ok()) << fleet.status();
  const int port = PortOf((*fleet)->addresses()[0]);
  (*fleet)->server(0).Signal(SIGKILL);
  (*fleet)->server(0).Stop(std::chrono::milliseconds(0));
  Holder thief(port);  // another program binds the port while it is down
  ASSERT_TRUE(thief.ok());
  absl::Status s = (*fleet)->Restart(0);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(absl::StrCat("cannot listen on its port ", port,
                                          " again: another process holds it")),
            std::string::npos)
      << s;
}

}  // namespace
}  // namespace zeroshard
