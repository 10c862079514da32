#include "launcher/server_watch.h"

#include "absl/strings/str_cat.h"
#include "common/subprocess.h"

namespace zeroshard {

std::optional<ServerFailure> WatchServers(
    LocalFleet& fleet, uint32_t n, bool may_restart,
    const std::string& work_dir, int* restarts,
    const std::function<void(const std::string&)>& say) {
  for (uint32_t k = 0; k < n; ++k) {
    const std::optional<int> st = fleet.server(k).Poll();
    if (!st) continue;
    const std::string log = absl::StrCat(work_dir, "/server-", k, ".log");
    if (!may_restart || *restarts >= kMaxServerRestarts) {
      return ServerFailure{absl::StrCat("shard server ", k, " exited with ",
                                        DescribeWaitStatus(*st)),
                           log};
    }
    ++*restarts;
    say(absl::StrCat("shard server ", k, " exited with ",
                     DescribeWaitStatus(*st),
                     "; restarting it (it restores its shutdown snapshot "
                     "or its newest checkpoint)"));
    absl::Status restarted = fleet.Restart(k);
    if (!restarted.ok()) {
      return ServerFailure{
          absl::StrCat("shard server ", k,
                       " could not be restarted: ", restarted.message()),
          log};
    }
  }
  return std::nullopt;
}

}  // namespace zeroshard
