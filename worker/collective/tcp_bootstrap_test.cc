#include "worker/collective/tcp_bootstrap.h"

#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace zeroshard {
namespace collective {
namespace {

std::unique_ptr<TcpBootstrap> Make(int rank, int size, const std::string& coord,
                                   absl::Duration timeout) {
  TcpBootstrapOptions o;
  o.rank = rank;
  o.size = size;
  o.coordinator = coord;
  o.timeout = timeout;
  auto b = TcpBootstrap::Create(o);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? std::move(*b) : nullptr;
}

// Runs AllGather on `ranks` of a group of `size` (rank 0 always), in threads.
std::vector<absl::StatusOr<std::vector<std::string>>> Gather(
    int size, const std::vector<int>& ranks, absl::Duration timeout) {
  auto root = Make(0, size, "127.0.0.1:0", timeout);
  const std::string coord = absl::StrCat("127.0.0.1:", root->port());
  std::vector<absl::StatusOr<std::vector<std::string>>> results(
      ranks.size(), absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ranks.size(); ++i) {
    threads.emplace_back([&, i] {
      const int r = ranks[i];
      std::unique_ptr<TcpBootstrap> b =
          r == 0 ? std::move(root) : Make(r, size, coord, timeout);
      results[i] = b->AllGather(absl::StrCat("blob-", r));
    });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

TEST(TcpBootstrapTest, EveryRankGetsEveryBlob) {
  auto results = Gather(4, {0, 1, 2, 3}, absl::Seconds(20));
  for (const auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(
        *r, (std::vector<std::string>{"blob-0", "blob-1", "blob-2", "blob-3"}));
  }
}

TEST(TcpBootstrapTest, MissingRanksAreNamed) {
  auto results = Gather(4, {0, 2}, absl::Milliseconds(300));
  ASSERT_EQ(results[0].status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(results[0].status().message().find("ranks 1, 3 of 4"),
            absl::string_view::npos)
      << results[0].status();
  // Rank 2 waits for the table, then gives up (or sees rank 0 leave).
  EXPECT_FALSE(results[1].ok());
}

TEST(TcpBootstrapTest, UnreachableCoordinatorTimesOut) {
  // Bind a port, learn it, close it: nobody listens there any more.
  int port;
  {
    auto probe = Make(0, 2, "127.0.0.1:0", absl::Seconds(1));
    port = probe->port();
  }
  auto b =
      Make(1, 2, absl::StrCat("127.0.0.1:", port), absl::Milliseconds(200));
  auto r = b->AllGather("x");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(r.status().message().find("could not reach rank 0"),
            absl::string_view::npos)
      << r.status();
}

TEST(TcpBootstrapTest, BadAddressIsInvalid) {
  TcpBootstrapOptions o;
  o.rank = 1;
  o.size = 2;
  o.coordinator = "no-port-here";
  EXPECT_EQ(TcpBootstrap::Create(o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A name that does not resolve (yet: a pod's DNS record comes after the
// pod) is retried until the timeout, on rank 0 (which binds it) and the
// others, and then named in the error.
TEST(TcpBootstrapTest, UnknownNameIsRetriedUntilTheTimeout) {
  for (int rank : {0, 1}) {
    TcpBootstrapOptions o;
    o.rank = rank;
    o.size = 2;
    o.coordinator = "zeroshard-no-such-host.invalid:29500";
    o.timeout = absl::Milliseconds(300);
    absl::StatusOr<std::vector<std::string>> r = absl::InternalError("not run");
    auto b = TcpBootstrap::Create(o);
    if (b.ok()) {
      r = (*b)->AllGather("x");
    } else {
      r = b.status();
    }
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded)
        << "rank " << rank << ": " << r.status();
    EXPECT_NE(r.status().message().find(
                  "cannot resolve 'zeroshard-no-such-host.invalid'"),
              absl::string_view::npos)
        << r.status();
  }
}

TEST(TcpBootstrapTest, SizeOneNeedsNoNetwork) {
  TcpBootstrapOptions o;
  auto b = TcpBootstrap::Create(o);
  ASSERT_TRUE(b.ok());
  auto r = (*b)->AllGather("solo");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, std::vector<std::string>{"solo"});
}

}  // namespace
}  // namespace collective
}  // namespace zeroshard
