#include "common/memory_limit.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/env/env.h"

namespace zeroshard {
namespace {

// The group's path and its ancestors ("/a/b", "/a", ""), innermost first.
std::vector<std::string> SelfAndAncestors(absl::string_view path) {
  std::vector<std::string> out;
  std::string p(absl::StripSuffix(path, "/"));
  while (true) {
    out.push_back(p);
    if (p.empty()) break;
    p.resize(p.rfind('/'));
  }
  return out;
}

std::optional<uint64_t> Rlimit(int resource) {
  struct rlimit r;
  if (getrlimit(resource, &r) != 0 || r.rlim_cur == RLIM_INFINITY) {
    return std::nullopt;
  }
  return static_cast<uint64_t>(r.rlim_cur);
}

}  // namespace

uint64_t MemoryMargin(uint64_t limit) {
  return std::min(std::max(limit / 10, kMinMemoryMargin), limit / 2);
}

std::optional<StateLimit> ChooseStateLimit(const MemoryLimits& limits) {
  std::optional<StateLimit> best;
  auto consider = [&](const std::optional<uint64_t>& v, std::string source) {
    if (!v.has_value() || (best.has_value() && *v >= best->limit)) return;
    best = StateLimit{0, *v, 0, std::move(source)};
  };
  consider(limits.physical, "physical memory");
  consider(limits.cgroup, absl::StrCat("cgroup ", limits.cgroup_file));
  consider(limits.rlimit_as, "RLIMIT_AS");
  consider(limits.rlimit_data, "RLIMIT_DATA");
  if (!best.has_value()) return best;
  best->margin = MemoryMargin(best->limit);
  best->bytes = std::max<uint64_t>(1, best->limit - best->margin);
  return best;
}

std::optional<uint64_t> ParseCgroupMemoryLimit(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  uint64_t v = 0;
  if (text == "max" || !absl::SimpleAtoi(text, &v) || v >= (1ull << 62)) {
    return std::nullopt;
  }
  return v;
}

std::vector<std::string> CgroupMemoryLimitFiles(
    absl::string_view proc_self_cgroup, const std::string& root) {
  std::vector<std::string> files;
  for (absl::string_view line : absl::StrSplit(proc_self_cgroup, '\n')) {
    // "hierarchy-id:controllers:path"; the path may itself hold ':'.
    std::vector<absl::string_view> f =
        absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() != 3 || f[2].empty() || f[2][0] != '/') continue;
    std::string dir, file;
    if (f[0] == "0" && f[1].empty()) {
      dir = root;
      file = "memory.max";
    } else if (const std::vector<absl::string_view> c =
                   absl::StrSplit(f[1], ',');
               std::find(c.begin(), c.end(), "memory") != c.end()) {
      dir = root + "/memory";
      file = "memory.limit_in_bytes";
    } else {
      continue;
    }
    for (const std::string& p : SelfAndAncestors(f[2])) {
      files.push_back(absl::StrCat(dir, p, "/", file));
    }
  }
  return files;
}

MemoryLimits ReadMemoryLimits() {
  MemoryLimits l;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) {
    l.physical = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
  }
  Env* env = DefaultEnv();
  const absl::StatusOr<std::string> self =
      ReadSmallFile(env, "/proc/self/cgroup");
  if (self.ok()) {
    for (const std::string& file :
         CgroupMemoryLimitFiles(*self, "/sys/fs/cgroup")) {
      const absl::StatusOr<std::string> text = ReadSmallFile(env, file);
      if (!text.ok()) continue;
      const std::optional<uint64_t> v = ParseCgroupMemoryLimit(*text);
      if (v.has_value() && (!l.cgroup.has_value() || *v < *l.cgroup)) {
        l.cgroup = v;
        l.cgroup_file = file;
      }
    }
  }
  l.rlimit_as = Rlimit(RLIMIT_AS);
  l.rlimit_data = Rlimit(RLIMIT_DATA);
  return l;
}

std::string HumanBytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

}  // namespace zeroshard
