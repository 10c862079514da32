// Load: W simulated workers (threads, each with its own ShardClient and
// connections) against K real zeroshard-server processes for a given time.
//
// Every step each worker pushes its whole gradient as its own contribution
// slot (contributions_per_step = W, so every server receives W concurrent
// streams per step), then gathers all parameters in bf16; a leader prepares
// and commits each step once all slots are in. Gradients are multiples of
// 2^-10 small enough that any summation order is exact, so the expected
// parameters are computed independently (tests/testing.h ReferenceAdamW over
// the exact sums) and compared bit for bit at the end; the servers' ledgers
// (contributions applied, duplicates ignored) must match the pushes exactly.
// Server memory is sampled every step (GetStats bytes_held_rss) and read at
// the end (VmHWM of each server process).
#ifndef ZEROSHARD_TESTS_LOAD_HARNESS_H_
#define ZEROSHARD_TESTS_LOAD_HARNESS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace zeroshard::testing {

struct LoadOptions {
  int workers = 64;
  uint32_t servers = 2;
  absl::Duration duration = absl::Seconds(12);
  int model_scale = 10;  // SmallSpec scale: ~23k parameters per unit
  std::string work_dir;  // server logs; empty: $TEST_TMPDIR or /tmp
  // Fault specs (common/fault/fault_spec.h) for the workers' clients and
  // for the servers; empty: none. Duplicates then reach the servers and
  // are counted, not applied.
  std::string worker_faults, server_faults;
};

struct LoadResult {
  absl::Status status;  // the first error of any worker or the leader
  uint64_t steps = 0;
  uint64_t params = 0;
  double seconds = 0;
  uint64_t pushes = 0, push_bytes = 0;     // contributions sent
  uint64_t gathers = 0, gather_bytes = 0;  // full-model gathers
  // Ledgers, summed over the servers.
  uint64_t contributions_applied = 0, duplicates_ignored = 0;
  uint64_t expected_contributions = 0;  // pushes x pieces per push
  bool params_match = false;            // bit for bit vs the reference
  uint64_t state_bytes = 0;             // model-state bytes, all servers
  uint64_t rss_first_step = 0;          // largest server RSS after step 0
  uint64_t rss_peak_sampled = 0;        // largest server RSS seen
  uint64_t vm_hwm = 0;                  // largest server VmHWM at the end
  uint64_t faults_injected = 0;         // by the workers' clients
};

// Runs the load. Never fails a test by itself: see result.status.
LoadResult RunLoad(const LoadOptions& options);

// "steps 41 in 12.1 s: 2624 pushes (216.3/s, 193 MiB/s), ..."
std::string DescribeLoad(const LoadResult& r);

}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_LOAD_HARNESS_H_
