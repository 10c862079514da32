// IsLoopbackAddress: which addresses name this machine's loopback (the
// shard client's shared-memory data plane, UCX kept on loopback for a
// one-machine job).
#include "common/hostname.h"

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

}  // namespace
}  // namespace zeroshard
