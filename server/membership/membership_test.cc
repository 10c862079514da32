#include "server/membership/membership.h"

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace zeroshard {
namespace {

constexpr int64_t kLease = 1000;

class MembershipTest : public ::testing::Test {
 protected:
  MembershipTest() : m_(Options()) {}

  MembershipOptions Options() {
    MembershipOptions o;
    o.lease_ms = kLease;
    o.now_ms = [this] { return now_.load(); };
    o.committed_step = [] { return uint64_t{42}; };
    o.log = [this](const std::string& line) {
      absl::MutexLock l(&log_mu_);
      log_.push_back(line);
    };
    o.max_jobs = 2;
    o.max_blob_bytes = 16;
    return o;
  }

  v1::JoinResponse Join(const std::string& worker,
                        const std::string& job = "j") {
    v1::JoinRequest req;
    req.set_job_id(job);
    req.set_worker_name(worker);
    req.set_address(worker + "-addr");
    req.set_node("n0");
    auto r = m_.Join(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : v1::JoinResponse();
  }
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      uint64_t id, const std::string& job = "j") {
    v1::HeartbeatRequest req;
    req.set_job_id(job);
    req.set_member_id(id);
    return m_.Heartbeat(req);
  }
  absl::StatusOr<v1::RendezvousResponse> Rendezvous(uint64_t id, uint64_t epoch,
                                                    const std::string& blob,
                                                    uint32_t wait_ms = 2000) {
    v1::RendezvousRequest req;
    req.set_job_id("j");
    req.set_member_id(id);
    req.set_epoch(epoch);
    req.set_blob(blob);
    req.set_wait_ms(wait_ms);
    return m_.Rendezvous(req);
  }
  // The current epoch as seen by member `id`'s heartbeat.
  uint64_t Epoch(uint64_t id) {
    auto r = Heartbeat(id);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->world().epoch() : 0;
  }
  bool Logged(const std::string& text) {
    absl::MutexLock l(&log_mu_);
    for (const std::string& line : log_) {
      if (line.find(text) != std::string::npos) return true;
    }
    return false;
  }

  std::atomic<int64_t> now_{1000000};
  absl::Mutex log_mu_;
  std::vector<std::string> log_;
  Membership m_;
};

TEST_F(MembershipTest, JoinOrderGivesIdsRanksAndEpochs) {
  const v1::JoinResponse a = Join("w0");
  EXPECT_EQ(a.member_id(), 1u);
  EXPECT_EQ(a.lease_ms(), uint64_t{kLease});
  EXPECT_EQ(a.world().epoch(), 1u);
  EXPECT_EQ(a.world().step(), 42u);
  ASSERT_EQ(a.world().members_size(), 1);
  EXPECT_EQ(a.world().members(0).rank(), 0u);
  EXPECT_EQ(a.world().members(0).address(), "w0-addr");
  const v1::JoinResponse b = Join("w1");
  const v1::JoinResponse c = Join("w2");
  EXPECT_EQ(b.member_id(), 2u);
  EXPECT_EQ(c.member_id(), 3u);
  EXPECT_EQ(c.world().epoch(), 3u);
  ASSERT_EQ(c.world().members_size(), 3);
  for (uint32_t r = 0; r < 3; ++r) {
    EXPECT_EQ(c.world().members(r).rank(), r);
    EXPECT_EQ(c.world().members(r).member_id(), r + 1);
  }
  EXPECT_TRUE(
      Logged("membership: job 'j' epoch 3: worker 'w2' joined as "
             "member 3 (3 members)"));

  // Member 2 leaves: ranks stay dense, in member id order.
  v1::LeaveRequest leave;
  leave.set_job_id("j");
  leave.set_member_id(2);
  auto left = m_.Leave(leave);
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_EQ(left->world().epoch(), 4u);
  ASSERT_EQ(left->world().members_size(), 2);
  EXPECT_EQ(left->world().members(1).member_id(), 3u);
  EXPECT_EQ(left->world().members(1).rank(), 1u);
  EXPECT_TRUE(Logged("epoch 4: member 2 ('w1') left (2 members)"));
  EXPECT_EQ(Heartbeat(2).status().code(), absl::StatusCode::kNotFound);

  // Another job counts on its own.
  EXPECT_EQ(Join("w0", "k").member_id(), 1u);
  EXPECT_EQ(Epoch(1), 4u);
}

TEST_F(MembershipTest, JoinUnderTheSameNameReplacesTheMember) {
  Join("w0");
  Join("w1");
  const v1::JoinResponse again = Join("w0");
  EXPECT_EQ(again.member_id(), 3u);
  EXPECT_EQ(again.world().epoch(), 3u);
  ASSERT_EQ(again.world().members_size(), 2);
  EXPECT_EQ(again.world().members(0).worker_name(), "w1");
  EXPECT_EQ(again.world().members(1).worker_name(), "w0");
  EXPECT_EQ(Heartbeat(1).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Logged("worker 'w0' joined as member 3, replacing member 1"));
}

TEST_F(MembershipTest, HeartbeatsKeepTheLeaseAndSilenceExpiresIt) {
  Join("w0");
  Join("w1");
  for (int i = 0; i < 5; ++i) {
    now_ += kLease * 2 / 3;
    ASSERT_TRUE(Heartbeat(1).ok());
    ASSERT_TRUE(Heartbeat(2).ok());
  }
  EXPECT_EQ(Epoch(1), 2u);
  // Member 1 stops; member 2's calls remove it.
  now_ += kLease / 2;
  ASSERT_TRUE(Heartbeat(2).ok());
  now_ += kLease / 2 + 1;
  auto hb = Heartbeat(2);
  ASSERT_TRUE(hb.ok()) << hb.status();
  EXPECT_EQ(hb->world().epoch(), 3u);
  ASSERT_EQ(hb->world().members_size(), 1);
  EXPECT_EQ(hb->world().members(0).member_id(), 2u);
  EXPECT_EQ(hb->world().members(0).rank(), 0u);
  EXPECT_TRUE(Logged("epoch 3: lease of member 1 ('w0') expired (1 member)"));
  const absl::Status gone = Heartbeat(1).status();
  EXPECT_EQ(gone.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(gone.message(),
            "member 1 of job 'j' is not in the group (its lease expired or it "
            "left); join again");
  EXPECT_EQ(Rendezvous(1, 3, "x").status().code(), absl::StatusCode::kNotFound);
  // Joining again works: a new member, a new epoch.
  EXPECT_EQ(Join("w0").world().epoch(), 4u);
}

TEST_F(MembershipTest, RendezvousOfThreeCompletesInRankOrder) {
  Join("w0");
  Join("w1");
  Join("w2");
  std::vector<absl::StatusOr<v1::RendezvousResponse>> got(3);
  std::vector<std::thread> threads;
  for (uint64_t id = 3; id >= 1; --id) {  // posts in reverse rank order
    threads.emplace_back([&, id] {
      got[id - 1] = Rendezvous(id, 3, "blob" + std::to_string(id));
    });
  }
  for (std::thread& t : threads) t.join();
  for (const auto& r : got) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->complete());
    EXPECT_EQ(r->world().epoch(), 3u);
    EXPECT_EQ(r->world().members_size(), 3);
    ASSERT_EQ(r->blobs_size(), 3);
    EXPECT_EQ(r->blobs(0), "blob1");
    EXPECT_EQ(r->blobs(1), "blob2");
    EXPECT_EQ(r->blobs(2), "blob3");
  }
  // A late poll of the formed epoch (another blob) gets the same answer,
  // also after the member set moved on.
  Join("w3");
  auto late = Rendezvous(2, 3, "other", 0);
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_TRUE(late->complete());
  EXPECT_EQ(late->world().epoch(), 3u);
  EXPECT_EQ(late->world().members_size(), 3);
  EXPECT_EQ(late->blobs(1), "blob2");
  // An older, never formed epoch: the current view, incomplete.
  auto old = Rendezvous(2, 2, "x", 0);
  ASSERT_TRUE(old.ok());
  EXPECT_FALSE(old->complete());
  EXPECT_EQ(old->world().epoch(), 4u);
  EXPECT_EQ(old->blobs_size(), 0);
}

TEST_F(MembershipTest, IncompleteRendezvousWaitsThenAnswersTheSameEpoch) {
  Join("w0");
  Join("w1");
  const auto start = std::chrono::steady_clock::now();
  auto r = Rendezvous(1, 2, "a", 150);
  const double ms = std::chrono::duration<double, std::milli>(
                        std::chrono::steady_clock::now() - start)
                        .count();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->complete());
  EXPECT_EQ(r->world().epoch(), 2u);
  EXPECT_GE(ms, 140);
  EXPECT_LT(ms, 1900);
  // The blob stays posted: member 2 completes the group at once.
  auto done = Rendezvous(2, 2, "b", 0);
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(done->complete());
  ASSERT_EQ(done->blobs_size(), 2);
  EXPECT_EQ(done->blobs(0), "a");
}

TEST_F(MembershipTest, JoinDuringRendezvousWakesWaitersWithTheNewEpoch) {
  Join("w0");
  Join("w1");
  std::vector<absl::StatusOr<v1::RendezvousResponse>> got(2);
  std::thread waiter([&] { got[0] = Rendezvous(1, 2, "a"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto start = std::chrono::steady_clock::now();
  Join("w2");
  waiter.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start,
            std::chrono::milliseconds(1500));
  ASSERT_TRUE(got[0].ok()) << got[0].status();
  EXPECT_FALSE(got[0]->complete());
  EXPECT_EQ(got[0]->world().epoch(), 3u);
  EXPECT_EQ(got[0]->world().members_size(), 3);
  // The old epoch's blob does not count for the new one.
  got[1] = Rendezvous(2, 3, "b", 0);
  ASSERT_TRUE(got[1].ok());
  EXPECT_FALSE(got[1]->complete());
}

TEST_F(MembershipTest, WaiterRemovesADeadMember) {
  Join("w0");
  Join("w1");
  absl::StatusOr<v1::RendezvousResponse> got;
  std::thread waiter([&] { got = Rendezvous(1, 2, "a"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  now_ += kLease + 1;  // member 2 never posts nor heartbeats
  waiter.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE(got->complete());
  EXPECT_EQ(got->world().epoch(), 3u);
  ASSERT_EQ(got->world().members_size(), 1);
  EXPECT_EQ(got->world().members(0).member_id(), 1u);  // renewed while waiting
  auto alone = Rendezvous(1, 3, "a", 0);
  ASSERT_TRUE(alone.ok());
  EXPECT_TRUE(alone->complete());
  EXPECT_EQ(alone->blobs_size(), 1);
}

TEST_F(MembershipTest, BadInputsNameTheProblemAndChangeNothing) {
  Join("w0");
  struct Case {
    absl::Status status;
    absl::StatusCode code;
    std::string text;
  };
  v1::JoinRequest no_job;
  no_job.set_worker_name("w9");
  v1::JoinRequest no_name;
  no_name.set_job_id("j");
  v1::HeartbeatRequest hb_no_job;
  hb_no_job.set_member_id(1);
  const Case cases[] = {
      {m_.Join(no_job).status(), absl::StatusCode::kInvalidArgument,
       "job_id is empty"},
      {m_.Join(no_name).status(), absl::StatusCode::kInvalidArgument,
       "worker_name is empty"},
      {m_.Heartbeat(hb_no_job).status(), absl::StatusCode::kInvalidArgument,
       "job_id is empty"},
      {Heartbeat(7).status(), absl::StatusCode::kNotFound,
       "member 7 of job 'j' is not in the group"},
      {Heartbeat(1, "nope").status(), absl::StatusCode::kNotFound,
       "of job 'nope' is not in the group"},
      {Rendezvous(1, 1, std::string(17, 'x')).status(),
       absl::StatusCode::kInvalidArgument, "17 bytes is over the 16-byte"},
      {Rendezvous(1, 2, "a").status(), absl::StatusCode::kInvalidArgument,
       "epoch 2 of job 'j' has not started (the current epoch is 1)"},
      {Rendezvous(5, 1, "a").status(), absl::StatusCode::kNotFound, "member 5"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(c.status.code(), c.code) << c.status;
    EXPECT_NE(c.status.message().find(c.text), std::string::npos) << c.status;
  }
  // Nothing changed: the same epoch, and member 1 has not posted a blob.
  EXPECT_EQ(Epoch(1), 1u);
  auto r = Rendezvous(1, 1, "ok", 0);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->complete());
  EXPECT_EQ(r->blobs(0), "ok");

  // max_jobs (2 here): a third job with members everywhere is refused; once
  // a job has no member left its place is reused.
  Join("w0", "k");
  v1::JoinRequest third;
  third.set_job_id("l");
  third.set_worker_name("w0");
  const absl::Status full = m_.Join(third).status();
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;
  EXPECT_NE(full.message().find("2 jobs already have members"),
            std::string::npos);
  v1::LeaveRequest leave;
  leave.set_job_id("k");
  leave.set_member_id(1);
  ASSERT_TRUE(m_.Leave(leave).ok());
  EXPECT_TRUE(m_.Join(third).ok());
}

// Issue 23 item 14: a member leaving with a failure fails the job for
// every member (and a joiner) until the job has no members left.
TEST_F(MembershipTest, LeaveWithAFailureFailsTheJobUntilItIsEmpty) {
  const uint64_t a = Join("w0").member_id();
  const uint64_t b = Join("w1").member_id();
  EXPECT_EQ(Join("w2").world().failure(), "");
  v1::LeaveRequest leave;
  leave.set_job_id("j");
  leave.set_member_id(b);
  leave.set_failure("INVALID_ARGUMENT: data: token 300 is not below vocab");
  ASSERT_TRUE(m_.Leave(leave).ok());
  auto seen = Heartbeat(a);
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(seen->world().failure(), leave.failure());
  EXPECT_TRUE(Logged("the job failed: INVALID_ARGUMENT: data: token 300"));
  // A later failure does not replace the first; a joiner sees it.
  leave.set_member_id(3);
  leave.set_failure("another");
  ASSERT_TRUE(m_.Leave(leave).ok());
  const v1::JoinResponse late = Join("w3");
  EXPECT_EQ(late.world().failure(),
            "INVALID_ARGUMENT: data: token 300 is "
            "not below vocab");
  // Once every member left, a Join starts the job afresh.
  for (uint64_t id : {a, late.member_id()}) {
    leave.set_member_id(id);
    leave.clear_failure();
    ASSERT_TRUE(m_.Leave(leave).ok());
  }
  EXPECT_EQ(Join("w0").world().failure(), "");
  // A long text is cut at kMaxFailureBytes, on a character boundary.
  leave.set_member_id(Join("w1").member_id());
  std::string text = "x";
  while (text.size() < kMaxFailureBytes + 10) text += "\xc3\xa9";  // é
  leave.set_failure(text);
  ASSERT_TRUE(m_.Leave(leave).ok());
  const std::string cut = Join("w4").world().failure();
  EXPECT_EQ(cut.size(), kMaxFailureBytes - 1);  // "x" and whole é's
  EXPECT_EQ(cut, text.substr(0, kMaxFailureBytes - 1));
}

TEST(MembershipClock, DefaultsWork) {
  Membership m(MembershipOptions{});
  v1::JoinRequest req;
  req.set_job_id("j");
  req.set_worker_name("w");
  auto joined = m.Join(req);
  ASSERT_TRUE(joined.ok());
  EXPECT_EQ(joined->lease_ms(), 10000u);
  EXPECT_EQ(joined->world().step(), 0u);
  v1::RendezvousRequest rv;
  rv.set_job_id("j");
  rv.set_member_id(joined->member_id());
  rv.set_epoch(1);
  rv.set_blob("b");
  auto r = m.Rendezvous(rv);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->complete());
}

}  // namespace
}  // namespace zeroshard
