// One training run against a real `zeroshard-server --storage=nvme` process
// with the server's memory watched from outside (/proc/<pid>/status): the
// shared code of //tests:nvme_server_bench (4 GiB of optimizer state, the
// NVMe issue's "resident memory under 512 MiB through a full step") and
// //tests:nvme_server_memory_test (a small state, in CI).
//
// The run: start one server (K = 1, tests/testing.h StartFleet) with
// --storage=nvme --nvme_path=<options.path>/nvme-<pid>, register a model
// whose fp32 master + Adam m + v (12 bytes per element) is at least
// options.state_bytes, write the initial parameters and push each step's
// gradient in chunks of options.chunk_elements (the client never holds more
// than one chunk), Prepare and Commit each step, then gather sampled ranges
// (fp32 masters and the bf16 serving copy) and compare them bit for bit
// with AdamW computed here for those elements only (the scalar kernel,
// which every server SIMD path equals). Values are functions of (stream,
// element index), so no full-size array exists on the client.
//
// Memory: a thread samples the server's VmRSS every 50 ms for the whole
// run; VmHWM is read at the end, before the server is stopped. The state
// directory is removed afterwards, and the server log folder unless the run
// failed.
#ifndef ZEROSHARD_TESTS_NVME_SERVER_RUN_H_
#define ZEROSHARD_TESTS_NVME_SERVER_RUN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace zeroshard::testing {

struct NvmeServerOptions {
  uint64_t state_bytes = 4ull << 30;  // p + m + v: at least this many bytes
  std::string path;                   // parent of the state and log folders
  // Flags for the server beyond --storage=nvme and --nvme_path.
  std::vector<std::string> server_flags;
  int steps = 2;
  uint64_t chunk_elements = 16u << 20;  // per write/push: 64 MiB of fp32
  int samples = 12;                     // ranges gathered and checked
  bool verbose = true;                  // progress lines on stdout
};

struct NvmeStepTiming {
  double push_s = 0, prepare_s = 0, commit_s = 0;
  double server_step_s = 0, server_io_wait_s = 0;  // GetStats after commit
  uint64_t rss_peak = 0;                           // sampled during the step
};

struct NvmeServerResult {
  absl::Status status;  // the first error, or a value that differs
  uint64_t elements = 0;
  uint64_t state_bytes = 0;  // 12 bytes per element the server owns
  double write_s = 0, gather_s = 0;
  std::vector<NvmeStepTiming> steps;
  uint64_t checked_elements = 0;  // compared bit for bit (fp32 and bf16)
  uint64_t rss_idle = 0;          // after RegisterModel
  uint64_t rss_peak = 0;          // largest VmRSS sampled
  uint64_t rss_samples = 0;
  uint64_t vm_hwm = 0;  // at the end, before the stop
  uint64_t storage_read = 0, storage_written = 0;  // tier I/O (GetStats)
};

// Runs it. Never fails a test by itself: see result.status.
NvmeServerResult RunNvmeServer(const NvmeServerOptions& options);

// Several lines: sizes, timings per step, memory, tier I/O.
std::string DescribeNvmeServer(const NvmeServerResult& r);

}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_NVME_SERVER_RUN_H_
