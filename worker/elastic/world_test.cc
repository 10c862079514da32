// FormWorld against a real zeroshard-server (--lease_ms=1000): members are
// threads of this process, each with its own ShardClient, MembershipClient
// and UCX transport. Three form a group; one vanishes without Leave and the
// other two re-form once its lease expired; a newcomer makes three again
// (rank 2); a graceful Leave bumps the epoch at once; a restarted shard 0
// expires its members.
#include "worker/elastic/world.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "client/membership_client.h"
#include "client/shard_client.h"
#include "fleet/local_fleet.h"
#include "gtest/gtest.h"
#include "worker/collective/collective.h"

namespace zeroshard::elastic {
namespace {

constexpr char kJob[] = "elastic-test";

struct Member {
  std::string name;
  std::unique_ptr<ShardClient> client;
  std::unique_ptr<MembershipClient> m;
  World world;  // destroyed first: its transport, then the membership
};

class WorldTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto binary = WorkspaceBinary("server/zeroshard-server");
    ASSERT_TRUE(binary.ok()) << binary.status();
    FleetOptions fo;
    fo.server_binary = *binary;
    const char* tmp = std::getenv("TEST_TMPDIR");
    fo.work_dir = tmp != nullptr ? tmp : "/tmp";
    fo.extra_args = {"--lease_ms=1000"};
    auto fleet = LocalFleet::Start(fo);
    ASSERT_TRUE(fleet.ok()) << fleet.status();
    fleet_ = *std::move(fleet);
  }

  std::unique_ptr<Member> NewMember(const std::string& name) {
    auto member = std::make_unique<Member>();
    member->name = name;
    ClientOptions co;
    co.addresses = fleet_->addresses();
    co.channels_per_server = 1;
    auto client = ShardClient::Connect(co);
    EXPECT_TRUE(client.ok()) << client.status();
    member->client = *std::move(client);
    MembershipClientOptions mo;
    mo.job_id = kJob;
    mo.worker_name = name;
    mo.node = "node";
    auto m = MembershipClient::Create(member->client.get(), mo);
    EXPECT_TRUE(m.ok()) << m.status();
    member->m = *std::move(m);
    return member;
  }

  std::unique_ptr<LocalFleet> fleet_;
};

// FormWorld on every member at once (a thread each).
void FormAll(const std::vector<Member*>& members, int min_workers,
             uint64_t min_epoch) {
  std::vector<absl::Status> results(members.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < members.size(); ++i) {
    threads.emplace_back([&, i] {
      Member& member = *members[i];
      WorldOptions o;
      o.min_workers = min_workers;
      o.min_epoch = min_epoch;
      o.timeout = absl::Seconds(60);
      o.comm.op_timeout = absl::Seconds(30);
      o.log = [&member](const std::string& line) {
        std::fprintf(stderr, "%s: %s\n", member.name.c_str(), line.c_str());
      };
      auto world = FormWorld(member.m.get(), o);
      if (!world.ok()) {
        results[i] = world.status();
        return;
      }
      member.world = *std::move(world);
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < members.size(); ++i) {
    EXPECT_TRUE(results[i].ok()) << members[i]->name << ": " << results[i];
  }
}

// The members form one group (one epoch, ranks 0..W-1 in member id order)
// and an AllReduce over it sums every rank's buffer.
void ExpectGroup(const std::vector<Member*>& members) {
  const int w = static_cast<int>(members.size());
  const uint64_t epoch = members[0]->world.epoch;
  std::set<int> ranks;
  for (Member* member : members) {
    const World& world = member->world;
    ASSERT_NE(world.comm, nullptr) << member->name;
    EXPECT_EQ(world.epoch, epoch) << member->name;
    EXPECT_EQ(world.view.epoch(), epoch) << member->name;
    EXPECT_EQ(world.size, w) << member->name;
    EXPECT_EQ(world.comm->size(), w) << member->name;
    EXPECT_EQ(world.comm->rank(), world.rank) << member->name;
    EXPECT_EQ(world.rank, RankOf(world.view, member->m->member_id()));
    ranks.insert(world.rank);
  }
  EXPECT_EQ(ranks.size(), members.size());
  EXPECT_EQ(*ranks.begin(), 0);
  EXPECT_EQ(*ranks.rbegin(), w - 1);

  constexpr uint64_t kCount = 10007;
  std::vector<std::vector<float>> bufs(members.size());
  std::vector<collective::CollectiveOp> ops;
  for (size_t i = 0; i < members.size(); ++i) {
    const int rank = members[i]->world.rank;
    bufs[i].resize(kCount);
    for (uint64_t j = 0; j < kCount; ++j) {
      bufs[i][j] = static_cast<float>((rank + 1) * 1000 + j % 100);
    }
    ops.push_back(members[i]->world.comm->AllReduce(
        bufs[i].data(), kCount, collective::DType::kFloat32));
  }
  for (size_t i = 0; i < members.size(); ++i) {
    ASSERT_TRUE(ops[i].Wait().ok())
        << members[i]->name << ": " << ops[i].Wait();
  }
  for (size_t i = 0; i < members.size(); ++i) {
    for (uint64_t j = 0; j < kCount; ++j) {
      const float want = static_cast<float>(w * (w + 1) / 2 * 1000 +
                                            w * static_cast<int>(j % 100));
      ASSERT_EQ(bufs[i][j], want) << members[i]->name << " at " << j;
    }
  }
}

// Destroys the members' communicators at once. UcxTransport closes its
// endpoints gracefully, which needs the peers' UCX workers to progress; an
// idle HostCommunicator does not progress, so one destroyed alone waits out
// its close timeout (5 s). Closing together, each one's close loop answers
// the others.
void DropComms(const std::vector<Member*>& members) {
  std::vector<std::thread> threads;
  for (Member* member : members) {
    threads.emplace_back([member] { member->world.comm.reset(); });
  }
  for (std::thread& t : threads) t.join();
}

bool InView(const v1::WorldView& view, const std::string& name) {
  for (const v1::Member& member : view.members()) {
    if (member.worker_name() == name) return true;
  }
  return false;
}

TEST_F(WorldTest, ReformsAfterExpiryAndJoin) {
  std::unique_ptr<Member> a = NewMember("a"), b = NewMember("b"),
                          c = NewMember("c");
  FormAll({a.get(), b.get(), c.get()}, 3, 0);
  ExpectGroup({a.get(), b.get(), c.get()});
  if (HasFatalFailure()) return;
  const uint64_t e1 = a->world.epoch;

  // c vanishes without Leave: its lease (1 s) runs out. Its communicator
  // goes alone while a and b are idle: the close waits out its timeout
  // but must not abort the process (ucx_transport.cc CloseEndpoints).
  c->world.comm.reset();
  DropComms({a.get(), b.get()});
  const std::string gone = c->name;
  c.reset();
  FormAll({a.get(), b.get()}, 2, e1 + 1);
  ExpectGroup({a.get(), b.get()});
  if (HasFatalFailure()) return;
  const uint64_t e2 = a->world.epoch;
  EXPECT_GT(e2, e1);
  EXPECT_FALSE(InView(a->world.view, gone));

  // A newcomer: three again, and it comes last.
  DropComms({a.get(), b.get()});
  std::unique_ptr<Member> d = NewMember("d");
  FormAll({a.get(), b.get(), d.get()}, 3, e2 + 1);
  ExpectGroup({a.get(), b.get(), d.get()});
  if (HasFatalFailure()) return;
  EXPECT_GT(a->world.epoch, e2);
  EXPECT_EQ(d->world.rank, 2);
  EXPECT_FALSE(a->m->expired());
  EXPECT_EQ(a->m->epoch(), a->world.epoch);
  DropComms({a.get(), b.get(), d.get()});
}

TEST_F(WorldTest, LeaveBumpsTheEpochAtOnce) {
  std::unique_ptr<Member> a = NewMember("a"), b = NewMember("b");
  ASSERT_TRUE(a->m->Join().ok());
  ASSERT_TRUE(b->m->Join().ok());
  auto before = a->m->Refresh();
  ASSERT_TRUE(before.ok()) << before.status();
  ASSERT_EQ(before->members_size(), 2);

  ASSERT_TRUE(b->m->Leave().ok());
  EXPECT_EQ(b->m->member_id(), 0u);
  auto after = a->m->Refresh();  // no wait: not the lease running out
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->epoch(), before->epoch() + 1);
  EXPECT_EQ(after->members_size(), 1);
  EXPECT_EQ(a->m->epoch(), after->epoch());
  EXPECT_FALSE(InView(*after, "b"));

  // Leaving twice is fine; a member that left cannot rendezvous.
  EXPECT_TRUE(b->m->Leave().ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(
      b->m->Rendezvous(after->epoch(), "x", 10).status()));
}

// A restarted shard 0 has forgotten the job: the lease keeper rides out the
// restart, then gets NOT_FOUND (expired()), and Join makes a member again.
TEST_F(WorldTest, ExpiresWhenShardZeroForgetsTheMember) {
  std::unique_ptr<Member> a = NewMember("a");
  ASSERT_TRUE(a->m->Join().ok());
  ASSERT_TRUE(fleet_->Restart(0).ok());
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (!a->m->expired() && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_TRUE(a->m->expired());
  EXPECT_TRUE(absl::IsNotFound(a->m->Refresh().status()));
  ASSERT_TRUE(a->m->Join().ok());
  EXPECT_FALSE(a->m->expired());
  EXPECT_EQ(a->m->epoch(), 1u);  // the new count, though older than seen
  auto view = a->m->Refresh();
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(RankOf(*view, a->m->member_id()), 0);
}

}  // namespace
}  // namespace zeroshard::elastic
