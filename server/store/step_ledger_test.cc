// The step ledger's rules without any buffers: pushes and their keys and
// ranges, epochs, prepare, commit exactly once, gates, restores.
#include "server/store/step_ledger.h"

#include <string>

#include "gtest/gtest.h"

namespace zeroshard {
namespace {

constexpr Range kOwned{128, 256};  // owned range of the shard

v1::PushHeader Push(uint64_t begin, uint64_t end, const std::string& key,
                    uint32_t slot = 0, uint64_t step = 0, uint64_t epoch = 0) {
  v1::PushHeader h;
  h.set_job_id("j");
  h.set_epoch(epoch);
  h.set_step(step);
  h.set_slot(slot);
  h.set_offset(begin);
  h.set_length(end - begin);
  h.set_dtype(v1::DTYPE_FP32);
  h.set_idempotency_key(key);
  return h;
}

v1::CommitStepRequest Commit(uint64_t step, bool skip = false,
                             uint64_t epoch = 0) {
  v1::CommitStepRequest r;
  r.set_job_id("j");
  r.set_epoch(epoch);
  r.set_step(step);
  r.set_clip_coef(1.0f);
  r.set_lr(1e-3);
  r.set_skip(skip);
  return r;
}

// Admits and finishes a push; false if it was a duplicate.
bool Deliver(StepLedger& l, const v1::PushHeader& h) {
  PushClaim c;
  absl::StatusOr<bool> fresh = l.AdmitPush(h, &c);
  EXPECT_TRUE(fresh.ok()) << fresh.status();
  if (fresh.ok() && *fresh) {
    if (c.adopts_epoch) {
      EXPECT_TRUE(l.AdoptEpoch(&c).ok());
    }
    l.FinishPush(c);
  }
  return fresh.ok() && *fresh;
}

PrepareResult Prepare(StepLedger& l, bool* ready, uint64_t step = 0,
                      uint64_t epoch = 0) {
  PrepareResult r;
  EXPECT_TRUE(l.BeginPrepare(epoch, step, ready, &r).ok());
  return r;
}

// Pushes the whole owned range of every slot, prepares and commits `step`.
void RunStep(StepLedger& l, uint32_t slots, uint64_t step, bool skip = false) {
  for (uint32_t s = 0; s < slots; ++s) {
    Deliver(
        l, Push(kOwned.begin, kOwned.end,
                "s" + std::to_string(step) + "/" + std::to_string(s), s, step));
  }
  bool ready = false;
  PrepareResult r = Prepare(l, &ready, step);
  ASSERT_TRUE(ready);
  l.SetPrepared(r);
  absl::StatusOr<CommitTicket> t = l.BeginCommit(Commit(step, skip));
  ASSERT_TRUE(t.ok()) << t.status();
  l.FinishCommit(Commit(step, skip), 0.0);
}

TEST(StepLedgerTest, PrepareIsReadyOnceEverySlotCoversTheRange) {
  StepLedger l("j", kOwned, 2, 32);
  EXPECT_TRUE(Deliver(l, Push(128, 192, "a")));
  EXPECT_TRUE(Deliver(l, Push(192, 256, "b")));
  bool ready = true;
  PrepareResult r = Prepare(l, &ready);
  EXPECT_FALSE(ready);
  EXPECT_FALSE(r.complete);
  EXPECT_EQ(r.received_elements, 128u);
  EXPECT_EQ(r.expected_elements, 256u);
  // A stream in flight keeps the step incomplete even when ranges cover it.
  PushClaim c;
  ASSERT_TRUE(l.AdmitPush(Push(128, 256, "c", 1), &c).ok());
  Prepare(l, &ready);
  EXPECT_FALSE(ready);
  l.FinishPush(c);
  r = Prepare(l, &ready);
  EXPECT_TRUE(ready);
  EXPECT_TRUE(r.complete);
  r.sum_squares = 4.5;
  l.SetPrepared(r);
  r = Prepare(l, &ready);  // answered from the first prepare
  EXPECT_FALSE(ready);
  EXPECT_EQ(r.sum_squares, 4.5);
  StoreStats stats;
  l.FillStats(false, &stats);
  EXPECT_EQ(stats.contributions_applied, 3u);
  EXPECT_EQ(stats.elements_applied, 256u);
}

TEST(StepLedgerTest, RequestsOfAnotherJobAreRefused) {
  StepLedger l("j", kOwned, 1, 32);
  EXPECT_TRUE(l.CheckJob("j").ok());
  absl::Status s = l.CheckJob("k");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("holds 'j'"), std::string::npos) << s;
}

TEST(StepLedgerTest, KeysAreAppliedOnce) {
  StepLedger l("j", kOwned, 1, 32);
  EXPECT_TRUE(Deliver(l, Push(128, 160, "k")));
  EXPECT_FALSE(Deliver(l, Push(128, 160, "k")));  // acknowledged, ignored
  EXPECT_EQ(l.duplicates_ignored(), 1u);
  PushClaim c;
  EXPECT_EQ(l.AdmitPush(Push(160, 192, "k"), &c).status().code(),
            absl::StatusCode::kInvalidArgument);  // another contribution
  ASSERT_TRUE(l.AdmitPush(Push(160, 192, "m"), &c).ok());
  EXPECT_EQ(l.AdmitPush(Push(160, 192, "m"), &c).status().code(),
            absl::StatusCode::kAborted);  // still being received
}

TEST(StepLedgerTest, RangesAreReceivedOnceAndReleasedWhenAStreamBreaks) {
  StepLedger l("j", kOwned, 1, 32);
  PushClaim c;
  ASSERT_TRUE(l.AdmitPush(Push(128, 192, "a"), &c).ok());
  EXPECT_EQ(l.AdmitPush(Push(160, 224, "b"), &c).status().code(),
            absl::StatusCode::kFailedPrecondition);  // overlaps "a"
  PushClaim a;
  a.slot = 0;
  a.range = Range{128, 192};
  a.key = "a";
  l.ReleasePush(a);
  EXPECT_TRUE(Deliver(l, Push(160, 224, "b")));
  EXPECT_TRUE(l.CheckNoPendingGradients().code() ==
              absl::StatusCode::kFailedPrecondition);
}

TEST(StepLedgerTest, MalformedPushesNameTheProblemAndChangeNothing) {
  StepLedger l("j", kOwned, 2, 32);
  struct Case {
    v1::PushHeader h;
    const char* why;
  };
  v1::PushHeader bad_dtype = Push(128, 160, "a");
  bad_dtype.set_dtype(static_cast<v1::DType>(99));
  for (const Case& c :
       {Case{bad_dtype, "unknown dtype"},
        Case{Push(128, 160, "a", 2), "contributions_per_step"},
        Case{Push(128, 160, ""), "idempotency_key"},
        Case{Push(128, 160, std::string(257, 'k')), "idempotency_key"},
        Case{Push(96, 160, "a"), "outside the owned range"},
        Case{Push(128, 128, "a"), "empty"},
        Case{Push(130, 160, "a"), "not aligned"}}) {
    PushClaim claim;
    absl::StatusOr<bool> r = l.AdmitPush(c.h, &claim);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.why;
    EXPECT_NE(r.status().message().find(c.why), std::string::npos)
        << r.status();
  }
  // The end of the owned range need not be aligned.
  StepLedger odd("j", Range{128, 250}, 1, 32);
  EXPECT_TRUE(Deliver(odd, Push(224, 250, "tail")));
  bool ready = false;
  EXPECT_EQ(Prepare(l, &ready).received_elements, 0u);
  EXPECT_TRUE(l.CheckNoPendingGradients().ok());
}

TEST(StepLedgerTest, ANewerEpochAbortsTheUnfinishedStep) {
  StepLedger l("j", kOwned, 1, 32);
  PushClaim c;
  ASSERT_TRUE(l.AdmitPush(Push(128, 160, "a"), &c).ok());
  EXPECT_EQ(l.AdmitPush(Push(160, 192, "b", 0, 0, 1), &c).status().code(),
            absl::StatusCode::kAborted);  // older streams still in flight
  PushClaim a{0, Range{128, 160}, "a"};
  l.FinishPush(a);
  EXPECT_TRUE(Deliver(l, Push(160, 192, "b", 0, 0, 1)));
  EXPECT_EQ(l.epoch(), 1u);
  bool ready = false;
  EXPECT_EQ(Prepare(l, &ready, 0, 1).received_elements, 32u);  // "a" dropped
  EXPECT_EQ(l.AdmitPush(Push(192, 224, "c"), &c).status().code(),
            absl::StatusCode::kFailedPrecondition);  // stale epoch
}

// A newer-epoch push changes nothing until it arrived whole: released
// (rejected or broken off), the epoch and the pending step stay; while it
// is staged, other pushes and commits are told to retry.
TEST(StepLedgerTest, ANewerEpochMovesOnlyWithAWholeContribution) {
  StepLedger l("j", kOwned, 1, 32);
  ASSERT_TRUE(Deliver(l, Push(128, 160, "a")));
  PushClaim staged;
  ASSERT_TRUE(l.AdmitPush(Push(128, 256, "new", 0, 0, 1), &staged).ok());
  EXPECT_TRUE(staged.adopts_epoch);
  EXPECT_EQ(l.epoch(), 0u);
  PushClaim c;
  EXPECT_EQ(l.AdmitPush(Push(160, 192, "b"), &c).status().code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(l.AdmitPush(Push(160, 192, "b2", 0, 0, 1), &c).status().code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(l.BeginCommit(Commit(0)).status().code(),
            absl::StatusCode::kAborted);
  l.ReleasePush(staged);  // rejected payload
  EXPECT_EQ(l.epoch(), 0u);
  ASSERT_TRUE(Deliver(l, Push(160, 256, "b")));
  bool ready = false;
  EXPECT_EQ(Prepare(l, &ready).received_elements, 128u);  // "a" kept
  EXPECT_TRUE(ready);
}

TEST(StepLedgerTest, AnEpochFarAboveOrReservedIsRefused) {
  StepLedger l("j", kOwned, 1, 32);
  PushClaim c;
  for (uint64_t epoch : {kMaxEpochJump + 1, kMaxEpoch + 1, ~uint64_t{0}}) {
    EXPECT_EQ(l.AdmitPush(Push(128, 256, "e", 0, 0, epoch), &c).status().code(),
              absl::StatusCode::kInvalidArgument)
        << epoch;
  }
  EXPECT_EQ(l.epoch(), 0u);
  EXPECT_TRUE(Deliver(l, Push(128, 256, "ok", 0, 0, kMaxEpochJump)));
  EXPECT_EQ(l.epoch(), kMaxEpochJump);
}

TEST(StepLedgerTest, CommitIsAppliedExactlyOnce) {
  StepLedger l("j", kOwned, 1, 32);
  EXPECT_EQ(l.BeginCommit(Commit(0)).status().code(),
            absl::StatusCode::kFailedPrecondition);  // not prepared
  Deliver(l, Push(128, 256, "a"));
  bool ready = false;
  PrepareResult r = Prepare(l, &ready);
  ASSERT_TRUE(ready);
  l.SetPrepared(r);
  v1::CommitStepRequest bad = Commit(0);
  bad.set_clip_coef(0);
  EXPECT_EQ(l.BeginCommit(bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  bad = Commit(0);
  bad.set_lr(-1);
  EXPECT_EQ(l.BeginCommit(bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<CommitTicket> t = l.BeginCommit(Commit(0));
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->step, 0u);
  EXPECT_EQ(t->optimizer_step, 1);
  EXPECT_EQ(l.BeginCommit(Commit(0)).status().code(),
            absl::StatusCode::kAborted);  // a commit in progress
  EXPECT_FALSE(l.CheckNotCommitting().ok());
  CommitResult done = l.FinishCommit(Commit(0), 0.5);
  EXPECT_TRUE(done.applied);
  EXPECT_EQ(done.step, 1u);
  EXPECT_EQ(l.step(), 1u);
  EXPECT_EQ(l.optimizer_steps(), 1u);
  t = l.BeginCommit(Commit(0));  // a retry whose answer was lost
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->already_committed);
  EXPECT_TRUE(t->result.already_committed);
  EXPECT_EQ(l.step(), 1u);
  // A retried push of the committed step is acknowledged, not refused.
  EXPECT_FALSE(Deliver(l, Push(128, 256, "a")));
  ASSERT_EQ(l.commits().size(), 1u);
  EXPECT_EQ(l.commits()[0].contributions, 1u);
  EXPECT_TRUE(l.CheckNoPendingGradients().ok());
}

TEST(StepLedgerTest, OverflowOnlyCommitsAsASkip) {
  StepLedger l("j", kOwned, 1, 32);
  Deliver(l, Push(128, 256, "a"));
  bool ready = false;
  PrepareResult r = Prepare(l, &ready);
  r.overflow = true;
  l.SetPrepared(r);
  EXPECT_EQ(l.BeginCommit(Commit(0)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(l.BeginCommit(Commit(0, true)).ok());
  EXPECT_FALSE(l.FinishCommit(Commit(0, true), 0).applied);
  EXPECT_EQ(l.step(), 1u);
  EXPECT_EQ(l.optimizer_steps(), 0u);
  EXPECT_TRUE(l.commits().back().skipped);
}

TEST(StepLedgerTest, GatesRefuseUntilLifted) {
  StepLedger l("j", kOwned, 1, 32);
  l.set_awaiting_restore();
  PushClaim c;
  EXPECT_EQ(l.AdmitPush(Push(128, 256, "a"), &c).status().code(),
            absl::StatusCode::kFailedPrecondition);
  bool ready;
  PrepareResult r;
  EXPECT_FALSE(l.BeginPrepare(0, 0, &ready, &r).ok());
  EXPECT_FALSE(l.BeginCommit(Commit(0)).ok());
  l.Restored(0, 0, 0, v1::TrainerState());
  EXPECT_FALSE(l.awaiting_restore());
  Deliver(l, Push(128, 256, "a"));
  r = Prepare(l, &ready);
  l.SetPrepared(r);
  l.set_draining();
  EXPECT_EQ(l.AdmitPush(Push(128, 256, "b"), &c).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_FALSE(l.settled());
  ASSERT_TRUE(l.BeginCommit(Commit(0)).ok());  // a prepared step commits
  l.FinishCommit(Commit(0), 0);
  EXPECT_TRUE(l.settled());
  EXPECT_EQ(l.BeginPrepare(0, 1, &ready, &r).code(),
            absl::StatusCode::kUnavailable);
}

TEST(StepLedgerTest, RestoreKeepsTheCommitsThatLeadUpToIt) {
  StepLedger l("j", kOwned, 1, 32);
  for (uint64_t s = 0; s < 5; ++s) RunStep(l, 1, s, s == 2);
  ASSERT_EQ(l.commits().size(), 5u);
  EXPECT_EQ(l.optimizer_steps(), 4u);
  v1::TrainerState ts;
  ts.set_step(3);
  l.Restored(3, 2, 7, ts);
  EXPECT_EQ(l.step(), 3u);
  EXPECT_EQ(l.optimizer_steps(), 2u);
  EXPECT_EQ(l.epoch(), 7u);
  EXPECT_EQ(l.restored_step(), 3u);
  ASSERT_EQ(l.commits().size(), 3u);
  EXPECT_EQ(l.ledger_first_step(), 0u);
  EXPECT_EQ(l.BeginCommit(Commit(2)).status().code(),
            absl::StatusCode::kFailedPrecondition);  // no retry across it
  l.Restored(10, 9, 1, ts);  // steps this ledger never saw
  EXPECT_TRUE(l.commits().empty());
  EXPECT_EQ(l.ledger_first_step(), 10u);
  EXPECT_EQ(l.epoch(), 7u);  // never lowered
}

TEST(StepLedgerTest, ResumeNeedsTheWorkersStateOfTheStep) {
  StepLedger l("j", kOwned, 1, 32);
  RunStep(l, 1, 0);
  EXPECT_EQ(l.Resume(1, 3).status().code(),
            absl::StatusCode::kFailedPrecondition);  // no state recorded
  v1::CommitStepRequest c = Commit(1);
  c.mutable_trainer_state()->set_step(2);
  c.mutable_trainer_state()->set_updates(2);
  Deliver(l, Push(128, 256, "x", 0, 1));
  bool ready = false;
  l.SetPrepared(Prepare(l, &ready, 1));
  ASSERT_TRUE(l.BeginCommit(c).ok());
  l.FinishCommit(c, 0);
  EXPECT_EQ(l.TrainerStateOf(2).updates(), 2u);
  EXPECT_EQ(l.TrainerStateOf(1).updates(), 0u);
  absl::StatusOr<v1::TrainerState> s = l.Resume(2, 3);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->step(), 2u);
  EXPECT_EQ(l.epoch(), 3u);
}

}  // namespace
}  // namespace zeroshard
