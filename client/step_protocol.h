// StepProtocol: one training step of a job whose optimizer state lives on
// the shard servers, from the ranks' side — the one implementation used by
// the C++ engine (worker/engine/engine.h) and meant for every other caller.
// Rank 0 of the StepGroup is the step leader:
//
//   start   every rank registers the model; a fresh job's leader writes the
//           initial parameters (and, with checkpoints on, checkpoints step
//           0); with checkpoints on, a job that finds servers at a later
//           step resumes there (every server at one step with the workers'
//           state of it), continues from their last commit (an elastic
//           group re-formed), or rolls back to their newest common
//           checkpoint;
//   decide  with server-side aggregation the norm comes from the servers:
//           the leader prepares the step and decides clip and skip
//           (common/optim/clip.h), every rank receives the decision;
//   commit  the leader prepares (unless `decide` did), commits with the
//           clip coefficient, lr and skip, and checkpoints every
//           `checkpoint_interval` steps; every rank learns the outcome.
//           Without recovery and not elastic, each server prepares within
//           the commit (CommitStepRequest.prepare): one round trip;
//   fetch   every rank reports how its parameter fetch went.
//
// Recovery (checkpoint_interval > 0): after the pushes and after the fetch
// every rank learns whether any failed; on a failure the leader looks at
// the servers (rollback.h). A restarted server or a commit that reached
// only some rolls every rank back to the newest common checkpoint with a
// new epoch (contributions of the aborted step are discarded) and each call
// returns the state to move to (Outcome::kRolledBack). With the servers all
// up and consistent, a failed fetch is retryable (kRetry); a step that
// failed for a reason a redo may not meet again (every failed push or the
// leader's prepare, commit or checkpoint UNAVAILABLE, DEADLINE_EXCEEDED or
// ABORTED: a network blip that outlasted the client's retries) is redone
// with a new epoch — from the servers' step where they recorded the
// workers' state with it, else from the newest common checkpoint
// (rollback.h RollBack) — kMaxRedos times in a row at most
// (Outcome::error says why); any other failed step is an error. Without
// recovery every failure is an error.
//
// Elastic groups (options.elastic): every outcome word also carries the
// newest membership epoch the leader knows (world_epoch()).
//
// Threading: one thread per rank calls it, every rank the same calls in
// the same order (they are collective over the group). Errors: the
// servers' and the group's; afterwards the job must be considered broken
// unless the call says otherwise.
#ifndef ZEROSHARD_CLIENT_STEP_PROTOCOL_H_
#define ZEROSHARD_CLIENT_STEP_PROTOCOL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "client/rollback.h"
#include "client/shard_client.h"
#include "common/optim/clip.h"
#include "proto/zeroshard.pb.h"

namespace zeroshard {

// The ranks of a job as the protocol sees them. Collective: every rank
// makes the same calls in the same order.
class StepGroup {
 public:
  virtual ~StepGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The `bytes` at `word` become rank 0's on every rank.
  virtual absl::Status Broadcast(void* word, size_t bytes) = 0;
  // Every rank's `bytes` at `mine`, in rank order, into `all` (size() ×
  // bytes).
  virtual absl::Status AllGather(const void* mine, size_t bytes, void* all) = 0;
};

struct StepProtocolOptions {
  // Checkpoints every this many steps; 0: off, and no recovery.
  int checkpoint_interval = 0;
  // How long the leader waits for a restarting server.
  double recovery_timeout_seconds = 60;
  // An elastic group: a start may continue from the servers' last commit.
  // world_epoch (may be null) is the newest membership epoch this process
  // knows (the leader calls it once per outcome); min_epoch the previous
  // group's epoch, which pushes and commits must exceed.
  bool elastic = false;
  std::function<uint64_t()> world_epoch;
  uint64_t min_epoch = 0;
  // Called after each of the leader's prepare/commit rounds with the
  // seconds it waited for the servers (step statistics); may be null.
  std::function<void(double seconds)> on_server_wait;
};

// What a collective call ended in.
struct Outcome {
  enum class Kind {
    kOk,
    kRolledBack,  // every rank moves to `state` (a checkpoint or resume)
    kContinued,   // an elastic start from the servers' last commit
    kRetry,       // a failed fetch with healthy servers: fetch again
  };
  Kind kind = Kind::kOk;
  // kRolledBack, kContinued. Every rank gets the fields a step needs
  // (step, updates, data position, seed, loss scaler); the leader also
  // the run's shape recorded with it (world_size .. data).
  v1::TrainerState state;
  // kRetry: why the fetch failed; kRolledBack after a start: why the step
  // was given up (a server restarted, or the failure of a step redone);
  // else OK.
  absl::Status error;
  bool moved() const {
    return kind == Kind::kRolledBack || kind == Kind::kContinued;
  }
};

class StepProtocol {
 public:
  // `client` and `group` must outlive the protocol.
  StepProtocol(ShardClient* client, StepGroup* group,
               StepProtocolOptions options);

  bool recovery() const { return options_.checkpoint_interval > 0; }
  // The epoch of pushes and commits (a roll back moves it up).
  uint64_t epoch() const { return epoch_; }
  // The membership epoch of the leader's last outcome word (elastic).
  uint64_t world_epoch() const { return world_epoch_; }

  // Start (see the file comment). `write_initial` is called on the leader
  // of a fresh job and writes the initial parameters; `now` is the
  // workers' state recorded with checkpoint 0. kOk: a fresh start.
  absl::StatusOr<Outcome> Start(
      const v1::ModelSpec& spec,
      const std::function<absl::Status()>& write_initial,
      const v1::TrainerState& now);

  // Server-side aggregation, after this rank's pushes of `step` ended with
  // `pushed`: the leader prepares and decides with the current
  // `loss_scale` and `max_norm`; kOk with *decision on every rank, or
  // kRolledBack.
  absl::StatusOr<Outcome> DecideOnServers(uint64_t step,
                                          const absl::Status& pushed,
                                          double loss_scale, double max_norm,
                                          StepDecision* decision);

  // Commits `step` once every rank's pushes ended (`pushed`), with the
  // leader's decision; `after` is the workers' state after the step.
  // `prepared`: DecideOnServers prepared it already. kOk or kRolledBack.
  absl::StatusOr<Outcome> Commit(uint64_t step, const absl::Status& pushed,
                                 const StepDecision& decision, double lr,
                                 const v1::TrainerState& after, bool prepared);

  // After this rank's parameter fetch ended with `fetched`: kOk (every
  // rank's went well), kRolledBack (fetch again, from the restored step)
  // or kRetry (the servers are healthy: fetch again).
  absl::StatusOr<Outcome> AfterFetch(const absl::Status& fetched);

 private:
  // Whether every rank's `mine` is OK; *transient (may be null): every
  // failure among them is one a redo may not meet again.
  absl::StatusOr<bool> AllOk(const absl::Status& mine,
                             bool* transient = nullptr);
  // After a phase whose outcome the leader knows: OK, a roll back, the
  // error; `at_start`: resume, continue or roll back when the servers hold
  // a later state. *healthy: the leader found every server up, none
  // restarted and all at one step. `redo`: the failure is transient, and
  // with healthy servers the step is redone from the newest checkpoint.
  absl::StatusOr<Outcome> Decide(const absl::Status& leader_status,
                                 bool at_start, bool* healthy,
                                 bool redo = false);
  // Leader: prepare (unless `prepared`) and commit `step`.
  absl::Status LeaderCommit(uint64_t step, const StepDecision& d, double lr,
                            const v1::TrainerState& after, bool prepared);
  // Leader of a fresh job: `write_initial`, then checkpoint step 0.
  absl::Status WriteInitial(const v1::ModelSpec& spec,
                            const std::function<absl::Status()>& write_initial,
                            const v1::TrainerState& now);
  bool leader() const { return group_->rank() == 0; }
  void ServerWait(double seconds) const;

  ShardClient* const client_;
  StepGroup* const group_;
  const StepProtocolOptions options_;
  uint64_t epoch_;
  uint64_t world_epoch_ = 0;
  std::vector<uint64_t> incarnations_;  // leader: the servers' at last view
  // Leader: steps redone for a transient failure since the last commit.
  static constexpr int kMaxRedos = 3;
  int redos_ = 0;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_STEP_PROTOCOL_H_
