// BehindGather against 2 real servers, on 1 and 2 ranks: the units arrive
// whole in the order they are needed, fetched in several calls, and a
// stale server step comes back from Need as ABORTED on every rank.
#include "worker/engine/behind_gather.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "worker/engine/optimizer.h"
#include "worker/engine/testing.h"
#include "worker/engine/zero_plan.h"

namespace zeroshard::engine {
namespace {

// Four units of 1000 floats, the forward needing them as 2, 0, 1, 3.
ModelLayout Layout() {
  auto layout = MakeModelLayout(
      {{"a", {1000}, 0}, {"b", {1000}, 0}, {"c", {1000}, 1}, {"d", {1000}, 1}},
      {1, 1, 1, 1}, {2, 0, 1, 3, 3, 1, 0, 2});
  EXPECT_TRUE(layout.ok()) << layout.status();
  return *layout;
}

absl::Status Expect(bool ok, const std::string& what) {
  return ok ? absl::OkStatus() : absl::InternalError(what);
}

TEST(BehindGatherTest, UnitsArriveWholeInNeedOrder) {
  const ModelLayout layout = Layout();
  const uint64_t n = layout.num_params();
  std::vector<float> want(n);
  for (uint64_t i = 0; i < n; ++i) want[i] = 0.5f * static_cast<float>(i);
  // One lane per server with whole pieces, then three lanes per server
  // with every piece in 1 KiB chunks.
  struct Shape {
    int lanes;
    uint64_t chunk_bytes;
    uint64_t min_calls;  // over the ranks, for 16000 bytes
  };
  for (const Shape shape : {Shape{1, uint64_t{1} << 20, 4}, Shape{3, 1024, 16}})
    for (int world : {1, 2}) {
      SCOPED_TRACE(absl::StrCat("world ", world, ", ", shape.lanes, " lanes"));
      auto fleet = StartTestFleet(2, {});
      ASSERT_TRUE(fleet.ok()) << fleet.status();
      const v1::ModelSpec spec =
          ZeroModelSpec(layout, ZeroOptions(), 2, kTestAlignment);
      absl::Status s = RunOnRanks(
          world, fleet->get(), InProcessHooks(),
          [&](int rank, collective::Communicator* comm, ShardClient* client,
              collective::InProcessHub*) -> absl::Status {
            ZS_RETURN_IF_ERROR(client->RegisterModel(spec));
            if (rank == 0) {
              ZS_RETURN_IF_ERROR(
                  client->WriteParameters(Range{0, n}, want.data()));
            }
            ZS_RETURN_IF_ERROR(comm->Barrier().Wait());
            std::vector<float> params(n, -1.0f);
            StepStats stats;
            // Buckets {a, b} and {c, d}; a fetch call per 4000 bytes.
            BehindGather g(layout, 2000, Precision::kFp32, comm, client,
                           absl::MakeSpan(params), 4000, shape.lanes,
                           shape.chunk_bytes);
            g.set_stats(&stats);
            const uint64_t before = client->gather_requests();
            ZS_RETURN_IF_ERROR(g.Start(0));
            for (int u : {2, 0, 1, 3}) {
              ZS_RETURN_IF_ERROR(g.Need(u));
              const Range r = layout.units[u];
              for (uint64_t i = r.begin; i < r.end; ++i) {
                ZS_RETURN_IF_ERROR(Expect(
                    params[i] == want[i],
                    absl::StrCat("unit ", u, " element ", i, ": ", params[i])));
              }
            }
            ZS_RETURN_IF_ERROR(g.Finish());
            ZS_RETURN_IF_ERROR(Expect(params == want, "after Finish"));
            // 16000 bytes over the ranks: at least min_calls / W requests
            // (a call per group, a request per chunk), not one.
            const uint64_t calls = client->gather_requests() - before;
            std::printf("rank %d of %d: %llu gather requests\n", rank, world,
                        static_cast<unsigned long long>(calls));
            ZS_RETURN_IF_ERROR(Expect(calls >= shape.min_calls / world,
                                      absl::StrCat(calls, " requests")));
            uint64_t mine = 0;  // this rank's parts of the buckets
            std::vector<int> bucket_of;
            for (const Range& b :
                 GatherBuckets(layout.units, 2000, &bucket_of)) {
              mine += 4 * PartOf(b, world, rank, comm->part_alignment()).size();
            }
            ZS_RETURN_IF_ERROR(
                Expect(stats.server_gather.bytes_received == mine,
                       absl::StrCat(stats.server_gather.bytes_received,
                                    " bytes, want ", mine)));
            // The servers are at step 0, not 7: every rank sees ABORTED,
            // from the first unit it needs and from Finish.
            ZS_RETURN_IF_ERROR(g.Start(7));
            const absl::Status stale = g.Need(2);
            ZS_RETURN_IF_ERROR(
                Expect(stale.code() == absl::StatusCode::kAborted &&
                           absl::StrContains(stale.message(), "expected 7"),
                       stale.ToString()));
            const absl::Status rest = g.Finish();
            return Expect(!rest.ok(), "Finish after a stale fetch: OK");
          });
      EXPECT_TRUE(s.ok()) << s;
    }
}

}  // namespace
}  // namespace zeroshard::engine
