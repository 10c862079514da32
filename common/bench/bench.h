// The benchmark harness: what every zeroshard benchmark needs, in one place
// (nccl-tests' shared harness, which each operation's file fills in).
//
//   - Timing with warm-up: RunAlternating runs `warmup_rounds` untimed
//     rounds, then `rounds` timed ones.
//   - Variants run alternately (round-robin: v1, v2, v3, v1, v2, v3, ...),
//     so that load from other processes on a shared machine hits every
//     variant alike; each variant's figure is the median of its rounds,
//     beside its min and max.
//   - The same-run reference: one variant may be marked as the reference;
//     Results gives every variant's time relative to it.
//   - BootstrapMedians: how sure a comparison of medians is (an interval
//     over the runs), for figures whose runs scatter as much as the
//     difference they measure.
//   - ResultLine: the `RESULT k=v ...` line a benchmark ends with (the last
//     line of its output), numbers formatted one way everywhere.
//   - Generic helpers: CPU seconds and page faults of processes and their
//     /proc/<pid>/status sizes, a work directory, deterministic pattern data.
//
// Example:
//   bench::Schedule schedule{/*warmup_rounds=*/1, /*rounds=*/7};
//   absl::StatusOr<bench::Results> r = bench::RunAlternating(
//       {{"scalar", bench::Timed([&] { Scalar(); }), /*reference=*/true},
//        {"avx2", bench::Timed([&] { Avx2(); })}},
//       schedule);
//   if (!r.ok()) return 1;
//   std::printf("%s", r->Table().c_str());
//   bench::ResultLine line;
//   line.Add("avx2_vs_scalar", r->SpeedVsReference("avx2"));
//   line.Print();
//
// Threading: nothing here starts a thread; RunAlternating calls the
// variants one at a time on the caller's thread. Errors: a variant's
// absl::Status comes back from RunAlternating prefixed with its name; a bad
// schedule or variant list is INVALID_ARGUMENT. Asking Results for a
// variant it does not hold is a programming error and aborts.
#ifndef ZEROSHARD_COMMON_BENCH_BENCH_H_
#define ZEROSHARD_COMMON_BENCH_BENCH_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace zeroshard {
namespace bench {

// ------------------------------------------------------------ summaries --

// The middle value (the mean of the two middle ones for an even count); 0
// for none.
double Median(std::vector<double> values);

struct Summary {
  int count = 0;
  double median = 0, min = 0, max = 0;
  // (max - min) / median; 0 when the median is 0.
  double spread() const { return median != 0 ? (max - min) / median : 0; }
};
Summary Summarize(const std::vector<double>& values);

// a / b, or 0 when b is 0.
double Ratio(double a, double b);

// How sure a comparison of medians is. `samples[i]` holds variant i's
// per-run figures; `stat` maps one median per variant (in that order) to a
// number, e.g. the ratio of two. `value` is `stat` of the samples' own
// medians; [low, high] is the percentile bootstrap interval at
// `confidence` (0 < confidence < 1): `stat` over `resamples` resamplings,
// each drawing every variant's runs with replacement. The draws come from
// a fixed seed, so the same samples always give the same interval. A
// variant with no runs makes everything NaN, as does a NaN from `stat`.
// Runs are taken to be independent: on a shared machine the interval says
// how far the runs' own scatter can move the figure, not what a quieter
// machine would measure. With few runs (under ~8 a variant) a bootstrap
// interval is too narrow: read it only beside enough rounds.
struct Interval {
  double value = 0, low = 0, high = 0;
};
Interval BootstrapMedians(
    const std::vector<std::vector<double>>& samples,
    const std::function<double(const std::vector<double>& medians)>& stat,
    double confidence = 0.95, int resamples = 2000);

// --------------------------------------------------------------- timing --

using Clock = std::chrono::steady_clock;
double SecondsSince(Clock::time_point start);

// Which run a variant is asked for: warm-up round w (0-based) or timed
// round r (0-based); `last` marks the last timed round.
struct RunInfo {
  int round = 0;
  bool warmup = false;
  bool last = false;
};

// One run of a variant: returns the seconds it measured (all of the run, a
// part of it, or a figure it reports itself, e.g. a median step time), or
// an error that ends the benchmark.
using RunFn = std::function<absl::StatusOr<double>(const RunInfo&)>;

namespace internal {
template <typename Fn>
absl::Status CallForStatus(Fn& fn, const RunInfo& info) {
  if constexpr (std::is_invocable_v<Fn&, const RunInfo&>) {
    if constexpr (std::is_void_v<std::invoke_result_t<Fn&, const RunInfo&>>) {
      fn(info);
      return absl::OkStatus();
    } else {
      return fn(info);
    }
  } else if constexpr (std::is_void_v<std::invoke_result_t<Fn&>>) {
    fn();
    return absl::OkStatus();
  } else {
    return fn();
  }
}
}  // namespace internal

// A RunFn that times all of `fn` by the wall clock. `fn` takes nothing or a
// const RunInfo&, and returns void or absl::Status.
template <typename Fn>
RunFn Timed(Fn fn) {
  return [fn = std::move(fn)](
             const RunInfo& info) mutable -> absl::StatusOr<double> {
    const Clock::time_point start = Clock::now();
    absl::Status s = internal::CallForStatus(fn, info);
    if (!s.ok()) return s;
    return SecondsSince(start);
  };
}

// ------------------------------------------------------------- variants --

struct Variant {
  std::string name;  // unique within one RunAlternating call
  RunFn run;
  bool reference = false;  // at most one variant per call
  // Work done per run in the unit of Table's rate (e.g. GB, Gelem); 0: no
  // rate is printed.
  double work = 0;
};

struct Schedule {
  int warmup_rounds = 1;  // >= 0, untimed
  int rounds = 5;         // >= 1, timed
};

// The variant index of each run, in order: `rounds` times 0, 1, ...,
// variants - 1 (round-robin).
std::vector<int> AlternationOrder(int variants, int rounds);

struct VariantResult {
  std::string name;
  bool reference = false;
  double work = 0;
  std::vector<double> seconds;  // one per timed round, in order
  Summary summary;
  double rate() const { return Ratio(work, summary.median); }
};

// The figures of one RunAlternating call.
class Results {
 public:
  Results() = default;
  explicit Results(std::vector<VariantResult> variants);

  const std::vector<VariantResult>& variants() const { return variants_; }
  // Aborts if no variant is called `name`.
  const VariantResult& Get(absl::string_view name) const;
  double Median(absl::string_view name) const {
    return Get(name).summary.median;
  }
  // Null when no variant is the reference.
  const VariantResult* reference() const;
  // Median time of `name` / median time of the reference (< 1: faster),
  // and its inverse (> 1: faster); 0 without a reference.
  double TimeVsReference(absl::string_view name) const;
  double SpeedVsReference(absl::string_view name) const;

  // One line per variant: runs, median, min and max in ms, spread, the rate
  // (work / median, in `rate_unit`, when the variant has work) and the time
  // relative to the reference.
  std::string Table(absl::string_view rate_unit = "") const;

 private:
  std::vector<VariantResult> variants_;
};

// Runs schedule.warmup_rounds untimed and schedule.rounds timed rounds of
// every variant, alternating (AlternationOrder). Stops at the first error.
absl::StatusOr<Results> RunAlternating(const std::vector<Variant>& variants,
                                       const Schedule& schedule);

// --------------------------------------------------------- RESULT line --

// Four significant digits, never an exponent: 1.234, 12.35, 1235, 123457,
// 0.001234; 0 as "0"; "nan", "inf", "-inf".
std::string FormatValue(double value);

// The last line of a benchmark: `RESULT k=v k=v ...`, keys in the order
// added. Keys are letters, digits and '_' (others become '_').
class ResultLine {
 public:
  ResultLine& Add(absl::string_view key, double value);  // FormatValue
  ResultLine& AddInt(absl::string_view key, int64_t value);
  // Appends the pairs of `more`, in their order.
  ResultLine& Append(const ResultLine& more);
  std::string ToString() const;
  // Flushes stderr and stdout, prints ToString() and a newline to stdout and
  // flushes it: nothing the process printed before comes after it.
  void Print() const;

 private:
  void AddFormatted(absl::string_view key, const std::string& value);
  std::string text_;  // " k=v" per pair
};

// -------------------------------------------------------- processes etc --

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

// A fresh directory for logs and port files: $TEST_TMPDIR/<name> when run
// by Bazel, else a new /tmp/<name>.XXXXXX.
std::string MakeWorkDir(const std::string& name);

// Deterministic finite floats in [-1, 1] (never NaN/Inf), index-dependent
// so that misplaced chunks are caught.
float PatternValue(uint64_t i);
void FillPattern(float* out, uint64_t n);

}  // namespace bench
}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_BENCH_BENCH_H_
