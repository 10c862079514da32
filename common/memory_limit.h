// How much memory this process may use, for the shard server's default
// --max_state_bytes: the smallest of physical memory, the cgroup's memory
// limit (v2 memory.max, v1 memory.limit_in_bytes, of the process's cgroup
// and every ancestor) and RLIMIT_AS / RLIMIT_DATA, less a margin for
// everything that is not model state (code, thread stacks, gRPC buffers):
// 10% of the limit, at least 256 MiB, at most half of it.
//
// The arithmetic and the parsing are pure functions of the numbers and the
// files' text (unit-tested with made-up inputs); ReadMemoryLimits is the
// thin reader of /proc and /sys behind them.
//
// Thread-safety: every function is; none keeps state.
#ifndef ZEROSHARD_COMMON_MEMORY_LIMIT_H_
#define ZEROSHARD_COMMON_MEMORY_LIMIT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace zeroshard {

// The limits found; nullopt: none (unlimited, or not available).
struct MemoryLimits {
  std::optional<uint64_t> physical;     // sysconf pages x page size
  std::optional<uint64_t> cgroup;       // the tightest cgroup limit
  std::string cgroup_file;              // where it came from
  std::optional<uint64_t> rlimit_as;    // RLIMIT_AS soft limit
  std::optional<uint64_t> rlimit_data;  // RLIMIT_DATA soft limit
};

struct StateLimit {
  uint64_t bytes = 0;   // the usable limit (limit - margin), >= 1
  uint64_t limit = 0;   // the smallest limit found
  uint64_t margin = 0;  // subtracted from it
  std::string source;   // "physical memory", "cgroup <file>", "RLIMIT_AS"...
};

inline constexpr uint64_t kMinMemoryMargin = 256ull << 20;

// The margin for `limit`: 10%, at least kMinMemoryMargin, at most half.
uint64_t MemoryMargin(uint64_t limit);

// The smallest limit of `limits`, less MemoryMargin. nullopt when there is
// none at all (not even physical memory).
std::optional<StateLimit> ChooseStateLimit(const MemoryLimits& limits);

// The value of a cgroup v2 memory.max or v1 memory.limit_in_bytes file:
// bytes, or nullopt for "max", for v1's "unlimited" (any value >= 2^62)
// and for text that is not a number.
std::optional<uint64_t> ParseCgroupMemoryLimit(absl::string_view text);

// The cgroup memory-limit files to read for a process whose
// /proc/self/cgroup is `proc_self_cgroup`, with the hierarchies mounted
// under `root` (/sys/fs/cgroup): for the v2 entry ("0::/a/b") and the v1
// memory entry ("N:memory:/a/b"), the file of the group and of each
// ancestor up to the mount's root (the effective limit is the smallest),
// innermost first. Files that do not exist are skipped by the reader (in a
// container the mount's root is the process's own group).
std::vector<std::string> CgroupMemoryLimitFiles(
    absl::string_view proc_self_cgroup, const std::string& root);

// Reads the limits of this process (/proc/self/cgroup, /sys/fs/cgroup,
// getrlimit, sysconf).
MemoryLimits ReadMemoryLimits();

// "1.5 GiB" style, for log lines.
std::string HumanBytes(uint64_t bytes);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_MEMORY_LIMIT_H_
