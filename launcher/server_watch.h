// The launchers' watch over the shard servers they started (`zeroshard
// train`, `zeroshard run`): one policy for a server that exits.
//
// Threading: called from the launcher's one polling thread.
#ifndef ZEROSHARD_LAUNCHER_SERVER_WATCH_H_
#define ZEROSHARD_LAUNCHER_SERVER_WATCH_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "fleet/local_fleet.h"

namespace zeroshard {

// Restarts per launcher run before a server's exit stops the job.
constexpr int kMaxServerRestarts = 10;

struct ServerFailure {
  std::string what;  // "shard server K exited with ..." / "could not be ..."
  std::string log;   // <work_dir>/server-K.log
};

// Polls servers 0..n-1 of `fleet` once. One that exited is restarted from
// its newest checkpoint (the workers roll back to it) when `may_restart`
// (the servers have a checkpoint dir) and *restarts < kMaxServerRestarts,
// saying so through `say`; otherwise its exit is the failure returned.
std::optional<ServerFailure> WatchServers(
    LocalFleet& fleet, uint32_t n, bool may_restart,
    const std::string& work_dir, int* restarts,
    const std::function<void(const std::string&)>& say);

}  // namespace zeroshard

#endif  // ZEROSHARD_LAUNCHER_SERVER_WATCH_H_
