// The standard process metrics of Prometheus client libraries, read from
// /proc/self at every scrape: process_resident_memory_bytes,
// process_virtual_memory_bytes, process_cpu_seconds_total,
// process_start_time_seconds, process_threads.
#ifndef ZEROSHARD_COMMON_METRICS_PROCESS_METRICS_H_
#define ZEROSHARD_COMMON_METRICS_PROCESS_METRICS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/metrics/registry.h"

namespace zeroshard::metrics {

struct ProcessSample {
  double resident_bytes = 0, virtual_bytes = 0;
  double cpu_seconds = 0;
  double start_time_seconds = 0;  // since the epoch
  double threads = 0;
};

// Parses the text of /proc/self/stat given the page size, clock ticks per
// second and the boot time (seconds since the epoch, /proc/stat "btime").
// INVALID_ARGUMENT when the text is not in that format.
absl::StatusOr<ProcessSample> ParseProcStat(absl::string_view stat,
                                            double page_bytes,
                                            double ticks_per_second,
                                            double boot_time_seconds);

// The byte count of `field` ("VmRSS", "VmHWM", ...) in /proc/<pid>/status
// (reported there in kB); 0 when the file or the field cannot be read.
uint64_t ProcStatusBytes(int pid, absl::string_view field);

// Adds a collector to `registry` that refreshes the metrics above (a read
// that fails leaves the previous values).
void AddProcessMetrics(Registry* registry);

}  // namespace zeroshard::metrics

#endif  // ZEROSHARD_COMMON_METRICS_PROCESS_METRICS_H_
