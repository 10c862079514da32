// zeroshard-ctl checkpoint / restore: checkpoints of a running job's
// servers taken and restored from outside the job (server/checkpoint/
// checkpoint_files.h has the files; the servers need --checkpoint_dir).
//
// Example:
//   ZS_RETURN_IF_ERROR(client->AttachToRegistered());
//   ZS_ASSIGN_OR_RETURN(std::string line, ctl::TakeCheckpoint(*client, ""));
//
// Errors: the servers' (prefixed by their address), e.g. FAILED_PRECONDITION
// "this server was started without --checkpoint_dir"; ABORTED when the
// servers never agreed on their step; NOT_FOUND when no checkpoint is
// complete on every server.
// Threading: the functions may run concurrently on different clients.
#ifndef ZEROSHARD_CTL_CHECKPOINT_COMMANDS_H_
#define ZEROSHARD_CTL_CHECKPOINT_COMMANDS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/shard_client.h"
#include "proto/zeroshard.pb.h"

namespace zeroshard::ctl {

// The newest step in every server's checkpoint_steps (step 0 too); nullopt
// when there is none.
std::optional<uint64_t> NewestCommonCheckpoint(
    const std::vector<v1::GetStatsResponse>& stats);

// Checkpoints the servers' current step with the trainer state they kept
// from the last commit. While a step is being committed (the servers'
// steps differ, or the job committed meanwhile) it retries a few times,
// 200 ms apart. Returns a line: the step, each shard's file and CRC-32C.
absl::StatusOr<std::string> TakeCheckpoint(ShardClient& client,
                                           const std::string& tag);

// Restores checkpoint `step` (nullopt: NewestCommonCheckpoint) on every
// server at an epoch above every server's (contributions of older epochs
// are then rejected). A step some server does not list is refused before
// any server moves (NOT_FOUND); a server that fails its restore (a damaged
// file) leaves the others restored: the error then says at which step each
// server is now. Returns a line: the step and the trainer state recorded
// with it.
absl::StatusOr<std::string> RestoreCheckpoint(ShardClient& client,
                                              std::optional<uint64_t> step);

}  // namespace zeroshard::ctl

#endif  // ZEROSHARD_CTL_CHECKPOINT_COMMANDS_H_
