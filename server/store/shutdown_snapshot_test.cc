// A shard server's graceful shutdown, on the store (server_main.cc drives
// it on SIGTERM): Drain refuses new work but lets a prepared step commit,
// WriteShutdownSnapshot keeps the last commit, the next store's
// RestoreNewest loads it (once) when it is newer than every checkpoint, and
// Restore with resume keeps a state that is already at the step; and a
// commit that prepares its step itself (CommitStepRequest.prepare), which
// the drain refuses like a prepare. The state lives on a MemEnv checkpoint
// directory.
#include <cmath>
#include <functional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/env/mem_env.h"
#include "common/model_spec.h"
#include "gtest/gtest.h"
#include "server/checkpoint/checkpoint_files.h"
#include "server/store/shard_store.h"

namespace zeroshard {
namespace {

constexpr uint64_t kElements = 1000;
constexpr char kJob[] = "snap";

v1::ModelSpec Spec() {
  v1::ModelSpec spec;
  spec.set_job_id(kJob);
  v1::TensorSpec* t = spec.add_tensors();
  t->set_name("w");
  t->add_shape(kElements);
  *spec.add_param_groups() = DefaultParamGroup(0.01);
  spec.set_num_servers(1);
  spec.set_alignment(8);
  spec.set_serving_dtype(v1::DTYPE_BF16);
  spec.set_contributions_per_step(1);
  return spec;
}

class ShutdownSnapshotTest : public ::testing::Test {
 protected:
  std::unique_ptr<ShardStore> NewStore() {
    StoreOptions o;
    o.checkpoint_dir = "/ckpt";
    o.env = &env_;
    return std::make_unique<ShardStore>(o);
  }

  // Pushes a gradient for the store's current step at `epoch`: elements
  // [offset, offset + length), element `nan_at` (if in range) NaN.
  static absl::Status Push(ShardStore* store, uint64_t step, uint64_t epoch,
                           uint64_t offset = 0, uint64_t length = kElements,
                           uint64_t nan_at = kElements) {
    v1::PushHeader h;
    h.set_job_id(kJob);
    h.set_offset(offset);
    h.set_length(length);
    h.set_dtype(v1::DTYPE_FP32);
    h.set_step(step);
    h.set_epoch(epoch);
    h.set_idempotency_key(absl::StrCat("g", step, "e", epoch, "o", offset));
    absl::StatusOr<std::unique_ptr<PushSession>> push = store->BeginPush(h);
    if (!push.ok()) return push.status();
    std::vector<float> g(length);
    for (uint64_t i = 0; i < length; ++i) {
      g[i] = offset + i == nan_at ? NAN : std::sin(offset + i + step);
    }
    absl::Status s = (*push)->AddChunk(g.data(), g.size() * 4);
    return s.ok() ? (*push)->Finish() : s;
  }

  // Pushes, prepares and commits step `step` with the workers' state.
  static void Step(ShardStore* store, uint64_t step) {
    ASSERT_TRUE(Push(store, step, 0).ok());
    absl::StatusOr<PrepareResult> p = store->Prepare(kJob, 0, step);
    ASSERT_TRUE(p.ok() && p->complete) << p.status();
    ASSERT_TRUE(store->Commit(CommitOf(step)).ok());
  }

  // Checkpoints step `step` in its two phases, calling `between` (the job
  // going on, say) after the first.
  static void Checkpoint(
      ShardStore* store, uint64_t step,
      const std::function<void()>& between = [] {}) {
    v1::CheckpointRequest c;
    c.set_job_id(kJob);
    c.set_step(step);
    absl::StatusOr<v1::CheckpointResponse> shard = store->Checkpoint(c);
    ASSERT_TRUE(shard.ok()) << shard.status();
    between();
    c.set_finalize(true);
    *c.add_shards() = shard->shard();
    ASSERT_TRUE(store->Checkpoint(c).ok());
  }

  static v1::CommitStepRequest CommitOf(uint64_t step) {
    v1::CommitStepRequest c;
    c.set_job_id(kJob);
    c.set_step(step);
    c.set_lr(1e-2);
    c.set_clip_coef(1.0);
    c.mutable_trainer_state()->set_step(step + 1);
    c.mutable_trainer_state()->set_data_offset(100 * (step + 1));
    return c;
  }

  static std::vector<float> Params(ShardStore* store) {
    std::vector<float> p(kElements);
    uint64_t step;
    EXPECT_TRUE(
        store->GatherInto(0, kElements, v1::DTYPE_FP32, p.data(), &step).ok());
    return p;
  }

  MemEnv env_{false};
};

TEST_F(ShutdownSnapshotTest, NextStartResumesAtTheLastCommit) {
  std::vector<float> before;
  {
    auto store = NewStore();
    ASSERT_TRUE(store->RegisterModel(Spec()).ok());
    for (uint64_t s = 0; s < 3; ++s) Step(store.get(), s);
    before = Params(store.get());
    EXPECT_TRUE(store->Drain(absl::Seconds(1)));
    absl::StatusOr<std::string> path = store->WriteShutdownSnapshot();
    ASSERT_TRUE(path.ok()) << path.status();
    EXPECT_EQ(*path, "/ckpt/step-0000000003/SNAPSHOT-00000-of-00001");
  }
  // Not a checkpoint: restore by step and the listing ignore it.
  auto listing = checkpoint::ListCheckpoints(&env_, "/ckpt");
  ASSERT_TRUE(listing.ok());
  EXPECT_TRUE(listing->complete.empty());
  EXPECT_TRUE(listing->skipped.empty());

  auto store = NewStore();
  std::vector<std::string> log;
  absl::StatusOr<uint64_t> restored = store->RestoreNewest(
      [&](const std::string& line) { log.push_back(line); });
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(*restored, 3u);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_NE(log[0].find("from the shutdown snapshot"), std::string::npos);
  StoreStats st = store->Stats();
  EXPECT_TRUE(st.awaiting_restore);
  EXPECT_EQ(st.step, 3u);
  EXPECT_EQ(st.trainer_state.data_offset(), 300);
  EXPECT_EQ(Params(store.get()), before);
  // Single use: removed once loaded, its data file too.
  EXPECT_FALSE(
      env_.FileExists("/ckpt/step-0000000003/SNAPSHOT-00000-of-00001"));
  EXPECT_FALSE(
      env_.FileExists("/ckpt/step-0000000003/snapshot-00000-of-00001.ckpt"));

  // Pushes wait for the job's Restore; a resume at another step is refused
  // and changes nothing.
  EXPECT_TRUE(absl::IsFailedPrecondition(Push(store.get(), 3, 1)));
  v1::RestoreRequest resume;
  resume.set_job_id(kJob);
  resume.set_step(2);
  resume.set_epoch(1);
  resume.set_resume(true);
  EXPECT_TRUE(absl::IsFailedPrecondition(store->Restore(resume).status()));
  EXPECT_TRUE(store->Stats().awaiting_restore);
  resume.set_step(3);
  absl::StatusOr<v1::RestoreResponse> r = store->Restore(resume);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->step(), 3u);
  EXPECT_EQ(r->trainer_state().data_offset(), 300);
  st = store->Stats();
  EXPECT_FALSE(st.awaiting_restore);
  EXPECT_EQ(st.epoch, 1u);
  EXPECT_EQ(Params(store.get()), before);
  // Training goes on at the new epoch; stale-epoch pushes are refused.
  EXPECT_TRUE(absl::IsFailedPrecondition(Push(store.get(), 3, 0)));
  ASSERT_TRUE(Push(store.get(), 3, 1).ok());
}

TEST_F(ShutdownSnapshotTest, CheckpointNewerThanTheSnapshotWins) {
  {
    auto store = NewStore();
    ASSERT_TRUE(store->RegisterModel(Spec()).ok());
    Step(store.get(), 0);
    ASSERT_TRUE(store->WriteShutdownSnapshot().ok());
    Step(store.get(), 1);
    Checkpoint(store.get(), 2);
  }
  auto store = NewStore();
  std::vector<std::string> log;
  absl::StatusOr<uint64_t> restored = store->RestoreNewest(
      [&](const std::string& line) { log.push_back(line); });
  ASSERT_TRUE(restored.ok());
  EXPECT_EQ(*restored, 2u);
  ASSERT_EQ(log.size(), 2u);
  EXPECT_NE(log[0].find("not newer than checkpoint 2; ignored"),
            std::string::npos);
  EXPECT_FALSE(
      env_.FileExists("/ckpt/step-0000000001/SNAPSHOT-00000-of-00001"));
}

// zeroshard-ctl checkpoint sends no workers' state, and the job may commit
// between the two phases: the manifest still holds the state of the step
// checkpointed (as the server held it at phase 1), so that a roll back to it
// restores the data position and schedule of that step.
TEST_F(ShutdownSnapshotTest, ACheckpointFromOutsideKeepsTheWorkersState) {
  {
    auto store = NewStore();
    ASSERT_TRUE(store->RegisterModel(Spec()).ok());
    Step(store.get(), 0);
    Step(store.get(), 1);
    // The job goes on before the manifest.
    Checkpoint(store.get(), 2, [&] { Step(store.get(), 2); });
  }
  auto store = NewStore();
  v1::RestoreRequest r;
  r.set_job_id(kJob);
  r.set_step(2);
  r.set_epoch(1);
  absl::StatusOr<v1::RestoreResponse> restored = store->Restore(r);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->trainer_state().step(), 2u);
  EXPECT_EQ(restored->trainer_state().data_offset(), 200u);  // CommitOf(1)
}

// A server killed mid-checkpoint left a temporary shard file in an attempt
// without a MANIFEST: the next completed checkpoint removes attempts older
// than itself, and leaves a later one (it may be in progress after a
// restore to an older step).
TEST_F(ShutdownSnapshotTest, ACompletedCheckpointRemovesOlderAbandonedOnes) {
  for (const char* dir :
       {"/ckpt", "/ckpt/step-0000000001", "/ckpt/step-0000000009"}) {
    ASSERT_TRUE(env_.CreateDir(dir).ok());
  }
  ASSERT_TRUE(
      WriteFileAtomic(&env_,
                      "/ckpt/step-0000000001/shard-00000-of-00001.ckpt.tmp-7-1",
                      "half")
          .ok());
  ASSERT_TRUE(
      WriteFileAtomic(&env_,
                      "/ckpt/step-0000000009/shard-00000-of-00001.ckpt.tmp-8-1",
                      "in progress")
          .ok());
  auto store = NewStore();
  ASSERT_TRUE(store->RegisterModel(Spec()).ok());
  Step(store.get(), 0);
  Step(store.get(), 1);
  Checkpoint(store.get(), 2);
  EXPECT_FALSE(env_.ListDir("/ckpt/step-0000000001").ok());  // removed
  EXPECT_EQ(env_.ListDir("/ckpt/step-0000000009")->size(), 1u);
}

TEST_F(ShutdownSnapshotTest, DamagedSnapshotFallsBackToTheCheckpoints) {
  {
    auto store = NewStore();
    ASSERT_TRUE(store->RegisterModel(Spec()).ok());
    Step(store.get(), 0);
    ASSERT_TRUE(store->WriteShutdownSnapshot().ok());
  }
  // Flip a payload byte of the snapshot's own file.
  const std::string file = "/ckpt/step-0000000001/snapshot-00000-of-00001.ckpt";
  {
    OpenOptions o;
    auto f = env_.OpenFile(file, o);
    ASSERT_TRUE(f.ok());
    uint64_t size = *(*f)->Size();
    char byte;
    ASSERT_TRUE((*f)->Read(size - 100, &byte, 1).ok());
    byte ^= 1;
    ASSERT_TRUE((*f)->Write(size - 100, &byte, 1).ok());
  }
  auto store = NewStore();
  std::vector<std::string> log;
  absl::StatusOr<uint64_t> restored = store->RestoreNewest(
      [&](const std::string& line) { log.push_back(line); });
  ASSERT_TRUE(restored.ok());
  EXPECT_EQ(*restored, 0u);  // nothing else to restore: a fresh start
  ASSERT_EQ(log.size(), 1u);
  EXPECT_NE(log[0].find("checksum"), std::string::npos) << log[0];
  EXPECT_EQ(store->Stats().step, 0u);
  EXPECT_FALSE(store->Stats().awaiting_restore);
}

TEST_F(ShutdownSnapshotTest, DrainRefusesNewWorkButLetsAPreparedStepCommit) {
  auto store = NewStore();
  ASSERT_TRUE(store->RegisterModel(Spec()).ok());
  Step(store.get(), 0);
  // Step 1 prepared before the drain: it may still commit.
  ASSERT_TRUE(Push(store.get(), 1, 0).ok());
  ASSERT_TRUE(store->Prepare(kJob, 0, 1).ok());
  EXPECT_FALSE(store->Drain(absl::Milliseconds(50)));  // nobody committed
  std::thread leader([&] {
    absl::SleepFor(absl::Milliseconds(100));
    EXPECT_TRUE(store->Commit(CommitOf(1)).ok());
  });
  EXPECT_TRUE(store->Drain(absl::Seconds(30)));
  leader.join();
  EXPECT_EQ(store->Stats().step, 2u);
  // Step 2 is refused from the start: UNAVAILABLE, nothing received.
  absl::Status push = Push(store.get(), 2, 0);
  EXPECT_TRUE(absl::IsUnavailable(push)) << push;
  EXPECT_NE(push.message().find("shutting down"), std::string::npos);
  EXPECT_TRUE(absl::IsUnavailable(store->Prepare(kJob, 0, 2).status()));
  absl::StatusOr<std::string> path = store->WriteShutdownSnapshot();
  ASSERT_TRUE(path.ok());
  EXPECT_NE(path->find("step-0000000002"), std::string::npos);
}

TEST_F(ShutdownSnapshotTest, ACommitThatPreparesGivesTheTwoPhaseBits) {
  auto two_phase = NewStore();
  auto fused = NewStore();
  ASSERT_TRUE(two_phase->RegisterModel(Spec()).ok());
  ASSERT_TRUE(fused->RegisterModel(Spec()).ok());
  for (uint64_t step = 0; step < 3; ++step) {
    Step(two_phase.get(), step);
    ASSERT_TRUE(Push(fused.get(), step, 0).ok());
    v1::CommitStepRequest c = CommitOf(step);
    c.set_prepare(true);
    absl::StatusOr<CommitResult> r = fused->Commit(c);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->applied);
    // A retry of it (its answer lost) is acknowledged, not redone.
    r = fused->Commit(c);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->already_committed);
  }
  EXPECT_EQ(fused->Stats().step, 3u);
  EXPECT_EQ(Params(fused.get()), Params(two_phase.get()));
}

TEST_F(ShutdownSnapshotTest, ACommitThatPreparesRefusesWhatPrepareWould) {
  auto store = NewStore();
  ASSERT_TRUE(store->RegisterModel(Spec()).ok());
  const std::vector<float> before = Params(store.get());
  v1::CommitStepRequest c = CommitOf(0);
  c.set_prepare(true);
  // Part of the gradient (up to an aligned boundary): ABORTED (commit
  // again later), nothing changes.
  constexpr uint64_t kHalf = 496;
  ASSERT_TRUE(Push(store.get(), 0, 0, 0, kHalf).ok());
  absl::Status s = store->Commit(c).status();
  EXPECT_TRUE(absl::IsAborted(s)) << s;
  EXPECT_NE(s.message().find("496 of 1000 gradient elements"),
            std::string::npos)
      << s;
  EXPECT_EQ(store->Stats().step, 0u);
  // The rest with a NaN: a non-skip commit is refused, a skip goes.
  ASSERT_TRUE(
      Push(store.get(), 0, 0, kHalf, kElements - kHalf, kElements - 1).ok());
  s = store->Commit(c).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_NE(s.message().find("NaN/Inf"), std::string::npos) << s;
  EXPECT_EQ(Params(store.get()), before);
  c.set_skip(true);
  absl::StatusOr<CommitResult> r = store->Commit(c);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->applied);
  EXPECT_EQ(store->Stats().step, 1u);
  EXPECT_EQ(Params(store.get()), before);
  // Draining with nothing prepared: refused like a prepare.
  ASSERT_TRUE(Push(store.get(), 1, 0).ok());
  EXPECT_TRUE(store->Drain(absl::Milliseconds(1)));  // nothing prepared
  c = CommitOf(1);
  c.set_prepare(true);
  EXPECT_TRUE(absl::IsUnavailable(store->Commit(c).status()));
  EXPECT_EQ(store->Stats().step, 1u);
}

TEST_F(ShutdownSnapshotTest, NothingToKeepWithoutAModel) {
  auto store = NewStore();
  EXPECT_TRUE(store->Drain(absl::Seconds(1)));
  absl::StatusOr<std::string> path = store->WriteShutdownSnapshot();
  ASSERT_TRUE(path.ok());
  EXPECT_EQ(*path, "");
}

}  // namespace
}  // namespace zeroshard
