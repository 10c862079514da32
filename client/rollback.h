// Rolling a job's servers back to a checkpoint: what the ZeRO engine's step
// leader does when a step fails with checkpoints on (ZeroOptions::
// checkpoint_interval > 0) — tell a restarted server from a real error and
// roll every server back to the newest checkpoint they all hold — and what
// `zeroshard-ctl restore` does by hand.
//
// Threading: use from one thread at a time. Errors: the
// client's; FAILED_PRECONDITION when a server restarted but no checkpoint
// is complete on every server.
#ifndef ZEROSHARD_CLIENT_ROLLBACK_H_
#define ZEROSHARD_CLIENT_ROLLBACK_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "client/shard_client.h"

namespace zeroshard {

struct ServerView {
  std::vector<uint64_t> incarnations;  // per server
  std::vector<uint64_t> steps;
  std::vector<uint64_t> epochs;
  std::vector<std::vector<uint64_t>> checkpoints;  // newest first
  std::vector<bool> awaiting_restore;    // restarted, refusing until Restore
  std::vector<v1::TrainerState> states;  // of each server's last commit
};

// The view of one round of stats (shard order).
ServerView ViewOf(const std::vector<v1::GetStatsResponse>& stats);

// Every server's stats, retried until `timeout_seconds` pass (a restarting
// server is unreachable for a moment); PERMISSION_DENIED at once when the
// caller's token may not read stats (an admin call).
absl::StatusOr<ServerView> ViewServers(ShardClient* client,
                                       double timeout_seconds);

// Steps listed by every server, newest first (pure).
std::vector<uint64_t> CommonCheckpoints(
    const std::vector<std::vector<uint64_t>>& lists);

// True when a server restarted since `known` (empty: nothing known) or the
// servers disagree on their step (a step committed on some only): the job
// must roll back (pure).
bool NeedsRollback(const ServerView& view, const std::vector<uint64_t>& known);

// Every server at one step S > 0 with the workers' state of S — live
// there, or restarted from its shutdown snapshot (a server stopped by
// SIGTERM) or a checkpoint of S: that state, else nullopt (pure). The job
// may then resume at S without loading a checkpoint.
std::optional<v1::TrainerState> ResumeState(const ServerView& view);

// A job (re)starting against live servers — a worker group re-formed
// after a worker left or joined — may continue from the servers' last
// commit instead of a checkpoint when every server is up, none restarted
// (awaiting a Restore), all are at one step above 0 and recorded the
// workers' state with it: that state, else nullopt (pure).
std::optional<v1::TrainerState> ContinueState(const ServerView& view);

// The epoch of the next roll back: above every server's and `mine` (a job
// restarted against servers that rolled back before starts at epoch 0).
uint64_t NextEpoch(const ServerView& view, uint64_t mine);

// Resumes every server at its step with `epoch` when ResumeState allows
// it; else restores the newest common checkpoint, trying older ones when
// one is damaged (DATA_LOSS). Returns the trainer state moved to.
absl::StatusOr<v1::TrainerState> RollBack(ShardClient* client,
                                          const ServerView& view,
                                          uint64_t epoch);

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_ROLLBACK_H_
