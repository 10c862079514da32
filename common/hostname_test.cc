// IsLoopbackAddress: which addresses name this machine's loopback (the
// shard client's shared-memory data plane, UCX kept on loopback for a
// one-machine job).
#include "common/hostname.h"

#include <utility>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"

namespace zeroshard {
namespace {

TEST(HostnameTest, LoopbackAddresses) {
  for (const char* a :
       {"127.0.0.1:29500", "127.1.2.3:0", "localhost:80", "[::1]:29500", "::1",
        "127.0.0.1", "ipv4:127.0.0.1:7000", "ipv6:[::1]:7000",
        "dns:///localhost:7000", "unix:/tmp/zeroshard.sock"}) {
    EXPECT_TRUE(IsLoopbackAddress(a)) << a;
  }
  for (const char* a : {"10.0.0.1:29500", "192.168.1.127:1",
                        "worker-0.svc:29500", "[fe80::1]:5", "", "1270.0.0.1:1",
                        "localhost.example:1", "dns:///shard-0.zs:7000"}) {
    EXPECT_FALSE(IsLoopbackAddress(a)) << a;
  }
}

// A port gRPC would take modulo 2^16 (so 101077 reaches a server on
// 35541) is an error naming the address.
TEST(HostnameTest, AddressPorts) {
  const std::pair<const char*, int> good[] = {{"127.0.0.1:7000", 7000},
                                              {"shard-0.zs.svc:65535", 65535},
                                              {"[::1]:1", 1},
                                              {"ipv4:10.0.0.1:29500", 29500},
                                              {"dns:///shard-0.zs:7000", 7000},
                                              {"localhost", 0},
                                              {"::1", 0},
                                              {"[fe80::1]", 0},
                                              {"unix:/tmp/zeroshard.sock", 0}};
  for (const auto& [address, port] : good) {
    absl::StatusOr<int> p = AddressPort(address);
    ASSERT_TRUE(p.ok()) << address << ": " << p.status();
    EXPECT_EQ(*p, port) << address;
  }
  for (const char* address :
       {"127.0.0.1:101077", "127.0.0.1:65536", "127.0.0.1:0",
        "host:", "host:7000x", "host:-1", ":7000", "[::1]:99999", "[::1",
        "[::1]7000", "dns:///shard-0:123456"}) {
    absl::StatusOr<int> p = AddressPort(address);
    ASSERT_FALSE(p.ok()) << address;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(p.status().message().find(address), std::string::npos)
        << p.status();
  }
  for (const char* address :
       {"\x01\x02", "host :7000", "h\nost:7000", "h\xc3\xa9:7000"}) {
    absl::StatusOr<int> p = AddressPort(address);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument)
        << absl::CHexEscape(address);
  }
}

// A client's server address needs a port (gRPC would take 443), but for a
// unix socket.
TEST(HostnameTest, ServerAddressesNeedAPort) {
  for (const char* address : {"127.0.0.1:7000", "[::1]:7000", "dns:///s-0:7",
                              "unix:/tmp/s.sock", "ipv4:unix-abstract:x"}) {
    EXPECT_TRUE(CheckServerAddress(address).ok()) << address;
  }
  for (const char* address : {"garbage", "::1", "[::1]", "dns:///shard-0"}) {
    absl::Status s = CheckServerAddress(address);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << address;
    EXPECT_NE(s.message().find("has no port"), std::string::npos) << s;
    EXPECT_NE(s.message().find(address), std::string::npos) << s;
  }
  EXPECT_NE(CheckServerAddress("h:70000").message().find("1..65535"),
            std::string::npos);
}

}  // namespace
}  // namespace zeroshard
