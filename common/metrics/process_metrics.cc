#include "common/metrics/process_metrics.h"

#include <unistd.h>

#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/env/env.h"

namespace zeroshard::metrics {
namespace {

// The whole of a /proc file ("" if unreadable). /proc files report size 0:
// ReadSmallFile reads to their end.
std::string ReadProcFile(const char* path) {
  return ReadSmallFile(DefaultEnv(), path).value_or("");
}

double BootTime() {
  std::istringstream in(ReadProcFile("/proc/stat"));
  std::string key;
  double value = 0;
  while (in >> key) {
    if (key == "btime" && (in >> value)) return value;
  }
  return 0;
}

}  // namespace

uint64_t ProcStatusBytes(int pid, absl::string_view field) {
  const std::string text =
      ReadSmallFile(DefaultEnv(), absl::StrCat("/proc/", pid, "/status"))
          .value_or("");
  const std::string prefix = absl::StrCat(field, ":");
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, prefix)) continue;
    uint64_t kib = 0;  // "VmHWM:    123456 kB"
    line = absl::StripAsciiWhitespace(line);
    return absl::SimpleAtoi(line.substr(0, line.find(' ')), &kib) ? kib * 1024
                                                                  : 0;
  }
  return 0;
}

absl::StatusOr<ProcessSample> ParseProcStat(absl::string_view stat,
                                            double page_bytes,
                                            double ticks_per_second,
                                            double boot_time_seconds) {
  // "pid (comm) state ppid ...": comm may hold spaces and ')', so fields
  // are counted from the last ')'. After it, field 3 (state) is index 0.
  const size_t close = stat.rfind(')');
  if (close == absl::string_view::npos) {
    return absl::InvalidArgumentError("/proc/self/stat: no ')'");
  }
  std::vector<absl::string_view> f =
      absl::StrSplit(stat.substr(close + 1), ' ', absl::SkipWhitespace());
  // utime 14, stime 15, num_threads 20, starttime 22, vsize 23, rss 24.
  if (f.size() < 22) {
    return absl::InvalidArgumentError("/proc/self/stat: too few fields");
  }
  auto field = [&](int n, double* out) {
    return absl::SimpleAtod(f[n - 3], out);
  };
  double utime, stime, threads, start, vsize, rss;
  if (!field(14, &utime) || !field(15, &stime) || !field(20, &threads) ||
      !field(22, &start) || !field(23, &vsize) || !field(24, &rss)) {
    return absl::InvalidArgumentError("/proc/self/stat: bad number");
  }
  ProcessSample s;
  s.cpu_seconds = (utime + stime) / ticks_per_second;
  s.threads = threads;
  s.start_time_seconds = boot_time_seconds + start / ticks_per_second;
  s.virtual_bytes = vsize;
  s.resident_bytes = rss * page_bytes;
  return s;
}

void AddProcessMetrics(Registry* registry) {
  Gauge* rss = registry->GetGauge("process_resident_memory_bytes",
                                  "Resident memory size in bytes.");
  Gauge* vsz = registry->GetGauge("process_virtual_memory_bytes",
                                  "Virtual memory size in bytes.");
  Counter* cpu = registry->GetCounter("process_cpu_seconds_total",
                                      "User and system CPU time in seconds.");
  Gauge* start = registry->GetGauge(
      "process_start_time_seconds",
      "Start time of the process since the epoch in seconds.");
  Gauge* threads =
      registry->GetGauge("process_threads", "Number of OS threads.");
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double boot = BootTime();
  registry->AddCollector([=] {
    absl::StatusOr<ProcessSample> s =
        ParseProcStat(ReadProcFile("/proc/self/stat"), page, ticks, boot);
    if (!s.ok()) return;
    rss->Set(s->resident_bytes);
    vsz->Set(s->virtual_bytes);
    cpu->Set(s->cpu_seconds);
    start->Set(s->start_time_seconds);
    threads->Set(s->threads);
  });
}

}  // namespace zeroshard::metrics
