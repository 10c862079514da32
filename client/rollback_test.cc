#include "client/rollback.h"

#include "gtest/gtest.h"

namespace zeroshard {
namespace {

// Two servers at `step`, each with the workers' state of that step.
ServerView Consistent(uint64_t step) {
  ServerView v;
  v.incarnations = {11, 22};
  v.steps = {step, step};
  v.epochs = {3, 5};
  v.checkpoints = {{5, 0}, {5, 0}};
  v.awaiting_restore = {false, false};
  v.states.resize(2);
  for (v1::TrainerState& s : v.states) {
    s.set_step(step);
    s.set_updates(step - 1);
    s.set_data_offset(4096);
  }
  return v;
}

TEST(RollbackTest, ContinuesFromConsistentServers) {
  std::optional<v1::TrainerState> s = ContinueState(Consistent(7));
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->step(), 7u);
  EXPECT_EQ(s->updates(), 6u);
  EXPECT_EQ(s->data_offset(), 4096);
  EXPECT_EQ(NextEpoch(Consistent(7), 2), 6u);
  EXPECT_EQ(NextEpoch(Consistent(7), 9), 10u);
}

TEST(RollbackTest, DoesNotContinueWhenAServerIsBehindRestartedOrFresh) {
  ServerView half = Consistent(7);
  half.steps[1] = 6;  // a commit that reached one server only
  EXPECT_FALSE(ContinueState(half).has_value());
  EXPECT_TRUE(NeedsRollback(half, {}));
  ServerView restarted = Consistent(7);
  restarted.awaiting_restore[0] = true;
  EXPECT_FALSE(ContinueState(restarted).has_value());
  ServerView stateless = Consistent(7);
  stateless.states[1].set_step(5);  // no state recorded with step 7
  EXPECT_FALSE(ContinueState(stateless).has_value());
  EXPECT_FALSE(ContinueState(Consistent(0)).has_value());  // fresh job
  EXPECT_FALSE(ContinueState(ServerView()).has_value());
}

TEST(RollbackTest, ResumesWhereARestartedServerCameBackAtTheSameStep) {
  // A server stopped by SIGTERM comes back from its shutdown snapshot: it
  // awaits a Restore (so the group does not simply continue) but is at the
  // others' step with their state, so the job resumes there.
  ServerView snapshot = Consistent(7);
  snapshot.awaiting_restore[1] = true;
  snapshot.incarnations[1] = 23;
  EXPECT_TRUE(NeedsRollback(snapshot, {11, 22}));
  EXPECT_FALSE(ContinueState(snapshot).has_value());
  std::optional<v1::TrainerState> s = ResumeState(snapshot);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->step(), 7u);
  EXPECT_EQ(s->data_offset(), 4096);
  // A crash restores an older checkpoint: only a roll back helps.
  ServerView crashed = snapshot;
  crashed.steps[1] = 5;
  crashed.states[1].set_step(5);
  EXPECT_FALSE(ResumeState(crashed).has_value());
  ServerView stateless = snapshot;
  stateless.states[0].set_step(6);
  EXPECT_FALSE(ResumeState(stateless).has_value());
  EXPECT_FALSE(ResumeState(Consistent(0)).has_value());
}

TEST(RollbackTest, CommonCheckpointsNewestFirst) {
  EXPECT_EQ(CommonCheckpoints({{10, 5, 0}, {5, 0}, {15, 10, 5, 0}}),
            (std::vector<uint64_t>{5, 0}));
  EXPECT_TRUE(CommonCheckpoints({{10}, {5}}).empty());
}

}  // namespace
}  // namespace zeroshard
