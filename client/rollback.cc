#include "client/rollback.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace zeroshard {

ServerView ViewOf(const std::vector<v1::GetStatsResponse>& stats) {
  ServerView view;
  for (const v1::GetStatsResponse& s : stats) {
    view.incarnations.push_back(s.incarnation());
    view.steps.push_back(s.step());
    view.epochs.push_back(s.epoch());
    view.checkpoints.emplace_back(s.checkpoint_steps().begin(),
                                  s.checkpoint_steps().end());
    view.awaiting_restore.push_back(s.awaiting_restore());
    view.states.push_back(s.trainer_state());
  }
  return view;
}

absl::StatusOr<ServerView> ViewServers(ShardClient* client,
                                       double timeout_seconds) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration<double>(timeout_seconds);
  while (true) {
    absl::StatusOr<std::vector<v1::GetStatsResponse>> stats = client->Stats();
    if (stats.ok()) return ViewOf(*stats);
    if (absl::IsPermissionDenied(stats.status()) ||
        absl::IsUnauthenticated(stats.status())) {
      return absl::PermissionDeniedError(absl::StrCat(
          "checkpoints and recovery need the step leader (rank 0) to read "
          "the servers' stats, checkpoint and restore: give rank 0 an admin "
          "token (",
          stats.status().message(), ")"));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::UnavailableError(
          absl::StrCat("servers still unreachable after ", timeout_seconds,
                       " s: ", stats.status().message()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

std::vector<uint64_t> CommonCheckpoints(
    const std::vector<std::vector<uint64_t>>& lists) {
  if (lists.empty()) return {};
  std::vector<uint64_t> common = lists[0];
  std::sort(common.begin(), common.end());
  for (size_t i = 1; i < lists.size(); ++i) {
    std::vector<uint64_t> other = lists[i], both;
    std::sort(other.begin(), other.end());
    std::set_intersection(common.begin(), common.end(), other.begin(),
                          other.end(), std::back_inserter(both));
    common = std::move(both);
  }
  common.erase(std::unique(common.begin(), common.end()), common.end());
  std::reverse(common.begin(), common.end());
  return common;
}

bool NeedsRollback(const ServerView& view, const std::vector<uint64_t>& known) {
  if (!known.empty() && known != view.incarnations) return true;
  return std::adjacent_find(view.steps.begin(), view.steps.end(),
                            std::not_equal_to<uint64_t>()) != view.steps.end();
}

std::optional<v1::TrainerState> ResumeState(const ServerView& view) {
  if (view.steps.empty() || view.steps[0] == 0 ||
      NeedsRollback(view, /*known=*/{})) {
    return std::nullopt;
  }
  for (size_t k = 0; k < view.steps.size(); ++k) {
    if (view.states[k].step() != view.steps[k]) return std::nullopt;
  }
  return view.states[0];
}

std::optional<v1::TrainerState> ContinueState(const ServerView& view) {
  for (bool awaiting : view.awaiting_restore) {
    if (awaiting) return std::nullopt;
  }
  return ResumeState(view);
}

uint64_t NextEpoch(const ServerView& view, uint64_t mine) {
  for (uint64_t e : view.epochs) mine = std::max(mine, e);
  return mine + 1;
}

absl::StatusOr<v1::TrainerState> RollBack(ShardClient* client,
                                          const ServerView& view,
                                          uint64_t epoch) {
  if (std::optional<v1::TrainerState> at = ResumeState(view)) {
    // A server that moved since the view makes this fail: fall back to the
    // checkpoints (the servers that resumed only discarded their pending
    // contributions).
    absl::StatusOr<v1::TrainerState> state =
        client->Restore(at->step(), epoch, /*resume=*/true);
    if (state.ok()) return state;
  }
  const std::vector<uint64_t> common = CommonCheckpoints(view.checkpoints);
  absl::Status last = absl::FailedPreconditionError(
      absl::StrCat("no checkpoint is complete on every server (servers at "
                   "steps ",
                   absl::StrJoin(view.steps, ", "), "); cannot roll back"));
  for (uint64_t step : common) {
    absl::StatusOr<v1::TrainerState> state = client->Restore(step, epoch);
    if (state.ok()) return state;
    last = state.status();
    if (!absl::IsDataLoss(last)) break;
  }
  return last;
}

}  // namespace zeroshard
