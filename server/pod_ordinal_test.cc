#include "server/pod_ordinal.h"

#include "gtest/gtest.h"

namespace zeroshard {
namespace {

TEST(PodOrdinalTest, TakesTheNumberAfterTheLastDash) {
  EXPECT_EQ(*PodOrdinal("zeroshard-server-0"), 0u);
  EXPECT_EQ(*PodOrdinal("zeroshard-server-17"), 17u);
  EXPECT_EQ(*PodOrdinal("web-3.zeroshard-server.default.svc.cluster.local"),
            3u);
  EXPECT_EQ(*PodOrdinal("a-2147483647"), 2147483647u);
}

TEST(PodOrdinalTest, RejectsNamesWithoutAnOrdinal) {
  for (const char* bad : {"", "zeroshard", "zeroshard-", "zeroshard-server-x",
                          "server-01", "server-1a", "server-2147483648",
                          "server-99999999999", "host.server-1"}) {
    const auto r = PodOrdinal(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("does not end in -<ordinal>"),
              absl::string_view::npos)
        << r.status();
  }
}

}  // namespace
}  // namespace zeroshard
