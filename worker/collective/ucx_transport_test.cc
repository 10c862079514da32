// IsLoopbackAddress: which rendezvous addresses mean "every rank on this
// machine" (UcxTransportOptions::loopback_only).
#include "worker/collective/ucx_transport.h"

#include "gtest/gtest.h"

namespace zeroshard::collective {
namespace {

TEST(UcxTransportTest, LoopbackAddresses) {
  for (const char* a : {"127.0.0.1:29500", "127.1.2.3:0", "localhost:80",
                        "[::1]:29500", "::1", "127.0.0.1"}) {
    EXPECT_TRUE(IsLoopbackAddress(a)) << a;
  }
  for (const char* a :
       {"10.0.0.1:29500", "192.168.1.127:1", "worker-0.svc:29500",
        "[fe80::1]:5", "", "1270.0.0.1:1", "localhost.example:1"}) {
    EXPECT_FALSE(IsLoopbackAddress(a)) << a;
  }
}

}  // namespace
}  // namespace zeroshard::collective
