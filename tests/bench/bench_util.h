// Small helpers shared by the transfer benchmarks: timing summaries, CPU
// accounting of this and other processes, and the test data pattern.
#ifndef ZEROSHARD_TESTS_BENCH_BENCH_UTIL_H_
#define ZEROSHARD_TESTS_BENCH_BENCH_UTIL_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace zeroshard {
namespace bench {

// User and system CPU seconds consumed so far, and minor page faults (a
// fault per 4 KiB page means data lands in freshly mapped memory).
struct CpuTimes {
  double user = 0;
  double sys = 0;
  double faults = 0;
  CpuTimes& operator+=(const CpuTimes& o) {
    user += o.user;
    sys += o.sys;
    faults += o.faults;
    return *this;
  }
  CpuTimes operator-(const CpuTimes& o) const {
    return CpuTimes{user - o.user, sys - o.sys, faults - o.faults};
  }
};

// CPU times and faults of process `pid` (all its threads) from
// /proc/<pid>/stat; zero if it cannot be read.
CpuTimes ProcessCpu(pid_t pid);
// Summed over `pids`.
CpuTimes ProcessesCpu(const std::vector<pid_t>& pids);

// Timings of the measured iterations of one operation plus the CPU the
// client side ("self") and the server side ("peers") spent in them.
struct Samples {
  std::vector<double> seconds;
  CpuTimes self_cpu;
  CpuTimes peer_cpu;

  double Best() const;
  double Median() const;
  // GB/s (1e9 bytes) of the best iteration.
  double BestGbps(uint64_t bytes) const;
  // "best 0.123 s (2.18 GB/s), median ... ; client cpu u+s ..., servers ..."
  std::string Describe(uint64_t bytes) const;
};

// Deterministic finite floats in [-1, 1] (never NaN/Inf), index-dependent
// so that misplaced chunks are caught.
float PatternValue(uint64_t i);
void FillPattern(float* out, uint64_t n);

// A fresh directory for logs and port files: $TEST_TMPDIR/<name> when run
// by Bazel, else a new /tmp/<name>.XXXXXX.
std::string MakeWorkDir(const std::string& name);

}  // namespace bench
}  // namespace zeroshard

#endif  // ZEROSHARD_TESTS_BENCH_BENCH_UTIL_H_
