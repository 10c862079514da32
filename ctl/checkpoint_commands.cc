#include "ctl/checkpoint_commands.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/rollback.h"
#include "common/status_macros.h"
#include "ctl/state_text.h"

namespace zeroshard::ctl {
namespace {

constexpr int kAttempts = 5;
constexpr std::chrono::milliseconds kPause{200};

// "shard 0: 6, shard 1: 7" from f(stats of shard k).
template <typename F>
std::string PerShard(const std::vector<v1::GetStatsResponse>& stats, F f) {
  std::vector<std::string> parts;
  for (const v1::GetStatsResponse& s : stats) {
    parts.push_back(absl::StrCat("shard ", s.shard_index(), ": ", f(s)));
  }
  return absl::StrJoin(parts, ", ");
}

// The step every server has committed, or ABORTED naming each one's.
absl::StatusOr<uint64_t> AgreedStep(ShardClient& client) {
  ZS_ASSIGN_OR_RETURN(std::vector<v1::GetStatsResponse> stats, client.Stats());
  for (const v1::GetStatsResponse& s : stats) {
    if (s.step() != stats[0].step()) {
      return absl::AbortedError(
          absl::StrCat("the servers disagree on their step (",
                       PerShard(stats, [](const auto& x) { return x.step(); }),
                       "): a step is being committed"));
    }
  }
  return stats[0].step();
}

}  // namespace

std::optional<uint64_t> NewestCommonCheckpoint(
    const std::vector<v1::GetStatsResponse>& stats) {
  if (stats.empty()) return std::nullopt;
  const std::vector<uint64_t> common =
      CommonCheckpoints(ViewOf(stats).checkpoints);
  if (common.empty()) return std::nullopt;
  return common.front();
}

absl::StatusOr<std::string> TakeCheckpoint(ShardClient& client,
                                           const std::string& tag) {
  absl::Status last;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(kPause);
    absl::StatusOr<uint64_t> step = AgreedStep(client);
    if (absl::IsAborted(step.status())) {
      last = step.status();
      continue;
    }
    ZS_RETURN_IF_ERROR(step.status());
    std::vector<std::string> paths;
    absl::StatusOr<std::vector<v1::CheckpointShard>> shards =
        client.Checkpoint(*step, nullptr, tag, &paths);
    if (shards.ok()) {
      std::vector<std::string> files;
      for (size_t k = 0; k < shards->size(); ++k) {
        files.push_back(absl::StrFormat("shard %u %s crc32c %08x",
                                        (*shards)[k].shard_index(), paths[k],
                                        (*shards)[k].crc32c()));
      }
      return absl::StrCat("checkpoint of step ", *step,
                          tag.empty() ? "" : absl::StrCat(" (tag ", tag, ")"),
                          ": ", absl::StrJoin(files, ", "));
    }
    // A commit that raced the checkpoint makes it fail (ABORTED, or
    // FAILED_PRECONDITION for the step): retry if the step moved on.
    last = shards.status();
    if (!absl::IsAborted(last) && !absl::IsFailedPrecondition(last)) {
      return last;
    }
    absl::StatusOr<uint64_t> now = AgreedStep(client);
    if (now.ok() && *now == *step) return last;
  }
  return absl::AbortedError(absl::StrCat(
      "no checkpoint after ", kAttempts,
      " attempts while the job kept committing steps; last: ", last.message()));
}

absl::StatusOr<std::string> RestoreCheckpoint(ShardClient& client,
                                              std::optional<uint64_t> step) {
  ZS_ASSIGN_OR_RETURN(std::vector<v1::GetStatsResponse> stats, client.Stats());
  const auto listed = [&] {
    return PerShard(stats, [](const auto& s) {
      return s.checkpoint_steps().empty()
                 ? std::string("none")
                 : absl::StrJoin(s.checkpoint_steps(), " ");
    });
  };
  if (!step.has_value()) {
    step = NewestCommonCheckpoint(stats);
    if (!step.has_value()) {
      return absl::NotFoundError(absl::StrCat(
          "no checkpoint is complete on every server (", listed(),
          "; a server lists the checkpoints under its --checkpoint_dir)"));
    }
  }
  // Every server must list it: none moves otherwise.
  for (const v1::GetStatsResponse& s : stats) {
    if (std::find(s.checkpoint_steps().begin(), s.checkpoint_steps().end(),
                  *step) == s.checkpoint_steps().end()) {
      return absl::NotFoundError(absl::StrCat(
          "no complete checkpoint of step ", *step, " on every server (",
          listed(), "); nothing was restored"));
    }
  }
  const uint64_t epoch = NextEpoch(ViewOf(stats), 0);
  absl::StatusOr<v1::TrainerState> restored = client.Restore(*step, epoch);
  if (!restored.ok()) {
    // Some may have moved (the others' files were good): say where each is.
    absl::StatusOr<std::vector<v1::GetStatsResponse>> now = client.Stats();
    std::string where = "unknown: stats failed";
    if (now.ok()) {
      where = PerShard(*now, [&](const auto& s) {
        return absl::StrCat("step ", s.step(),
                            s.epoch() == epoch ? " (restored)" : "");
      });
    }
    return absl::Status(
        restored.status().code(),
        absl::StrCat(restored.status().message(),
                     "; the servers are now at: ", where,
                     ". Restore another step on every server, or start the "
                     "job: it rolls back to their newest common checkpoint"));
  }
  const v1::TrainerState& state = *restored;
  return absl::StrCat("restored step ", *step, " at epoch ", epoch,
                      "; trainer state: ", TrainerStateText(state));
}

}  // namespace zeroshard::ctl
