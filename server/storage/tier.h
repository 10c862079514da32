// StorageTier: where a shard server keeps the optimizer state of its owned
// range — fp32 master p, AdamW moments m and v, the 16-bit serving copy and
// the fp32 gradient accumulator g — and how an optimizer step runs over it.
// Two implementations:
//   RamTier  (ram_tier.h)   everything in RAM (today's ShardStore layout)
//   NvmeTier (nvme_tier.h)  files under --nvme-path, O_DIRECT + io_uring,
//                           the step pipelined over sub-groups
// Both compute the same AdamWStep() over the same elements, so p, m, v and
// the serving copy are bit-identical between them after the same calls.
//
// Elements are tier-relative: [0, layout.size). A new tier holds p = m = v =
// g = 0 and serve = the 16-bit form of p. Invariant kept by every call:
// serve[i] == Fp32ToBf16(p[i]) (or Fp16), so serving never lags the master.
//
// Errors: INVALID_ARGUMENT for ranges outside [0, size) or malformed
// arguments; the Env's codes (RESOURCE_EXHAUSTED for a full device, DATA_LOSS
// for a checksum mismatch or a truncated file, naming the file) for I/O. A
// failed Step leaves the tier at its previous step: p, m, v, serve unchanged
// and readable, and the step may be retried.
//
// Threading: Read* calls may run concurrently with each other and with Step
// (they see the last committed step). Write*/Add*/ZeroGrad/Step/Snapshot/
// Flush are serialised by the caller (the store's step protocol does this:
// gradients are written before Prepare, Step runs in Commit). GradWriters
// of disjoint ranges may run concurrently with each other (not with those
// calls).
#ifndef ZEROSHARD_SERVER_STORAGE_TIER_H_
#define ZEROSHARD_SERVER_STORAGE_TIER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/optim/adamw.h"

namespace zeroshard {
namespace storage {

// Elements [begin, end) are updated with the hyperparameters of `group`.
struct GroupSpan {
  uint64_t begin = 0;
  uint64_t end = 0;
  uint32_t group = 0;
};

struct TierLayout {
  uint64_t size = 0;                         // elements
  ServingType serving = ServingType::kBf16;  // kBf16 or kFp16
  // Sorted, disjoint spans inside [0, size). Elements outside every span are
  // left unchanged by Step.
  std::vector<GroupSpan> groups;
  uint32_t num_groups() const;
};

// INVALID_ARGUMENT naming the problem (unsorted/overlapping spans, span past
// the end, serving type kNone).
absl::Status ValidateLayout(const TierLayout& layout);

struct TierStats {
  uint64_t steps = 0;  // committed optimizer steps
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
  double last_step_seconds = 0;
  // Time the last step's optimizer thread waited for reads or buffer
  // write-backs; read+write bytes of that step over its time.
  double last_step_io_wait_seconds = 0;
  double last_step_bandwidth_bytes_per_s = 0;
  uint64_t last_step_bytes = 0;
  // RAM this tier holds in buffers (state arrays for RamTier; pipeline
  // buffers, read cache and scratch for NvmeTier), now and at most.
  uint64_t bytes_allocated = 0;
  uint64_t peak_bytes_allocated = 0;
  uint64_t cache_hits = 0;
  uint64_t cache_misses = 0;
  bool direct_io = false;  // every state file opened with O_DIRECT
};

// Overwrites the gradient accumulator's g[offset, offset + n) from elements
// appended in order (one push stream). Elements appended may reach the
// tier before Finish; a writer destroyed unfinished leaves them written (as
// the WriteGrad calls it replaces would have) and waits for its I/O first.
class GradWriter {
 public:
  virtual ~GradWriter() = default;
  // The next `count` elements; INVALID_ARGUMENT past n.
  virtual absl::Status Append(const float* data, uint64_t count) = 0;
  // OK once all n elements are in the tier; INVALID_ARGUMENT if fewer
  // were appended.
  virtual absl::Status Finish() = 0;
};

// A GradWriter of [offset, offset + n) that hands each Append to
// write(at, data, count) at the next position (INVALID_ARGUMENT past n).
std::unique_ptr<GradWriter> NewSequentialGradWriter(
    uint64_t offset, uint64_t n,
    std::function<absl::Status(uint64_t at, const float* data, uint64_t count)>
        write);

class StorageTier {
 public:
  virtual ~StorageTier() = default;

  virtual const TierLayout& layout() const = 0;

  // Writes p[offset, offset + n) and the matching serving copy; m, v keep
  // their values (parameter initialisation / WriteParameters).
  virtual absl::Status WriteMaster(uint64_t offset, const float* data,
                                   uint64_t n) = 0;
  virtual absl::Status ReadMaster(uint64_t offset, uint64_t n, float* out) = 0;
  virtual absl::Status ReadMoments(uint64_t offset, uint64_t n, float* m,
                                   float* v) = 0;
  // Overwrites m, v [offset, offset + n) (restoring a checkpoint; with
  // WriteMaster for p). Durable at the next Flush.
  virtual absl::Status WriteMoments(uint64_t offset, const float* m,
                                    const float* v, uint64_t n) = 0;
  // The serving copy of [offset, offset + n) (through the read cache on
  // NvmeTier) and the number of steps it reflects (may be null).
  virtual absl::Status ReadServing(uint64_t offset, uint64_t n, uint16_t* out,
                                   uint64_t* step) = 0;

  // The gradient accumulator: overwrite, add (g[i] += data[i] in fp32, in
  // the order of the calls), read, reset to zero.
  virtual absl::Status WriteGrad(uint64_t offset, const float* data,
                                 uint64_t n) = 0;
  virtual absl::Status AddGrad(uint64_t offset, const float* data,
                               uint64_t n) = 0;
  virtual absl::Status ReadGrad(uint64_t offset, uint64_t n, float* out) = 0;
  virtual absl::Status ZeroGrad() = 0;
  // A writer of g[offset, offset + n) (INVALID_ARGUMENT outside the tier).
  // The default forwards each Append to WriteGrad, which must then be safe
  // for disjoint ranges run concurrently (RamTier's is).
  virtual absl::StatusOr<std::unique_ptr<GradWriter>> NewGradWriter(
      uint64_t offset, uint64_t n);
  // Calls fn(g) with g[0, n) = the gradient's [offset, offset + n); with
  // `write`, what fn leaves there is the gradient afterwards (fn's error
  // changes nothing on a tier with files; in RAM, g is the gradient
  // itself). Visits of disjoint ranges may run concurrently. The default
  // reads into a buffer and writes it back, serialising the reads and
  // writes of concurrent writing visits (neighbouring ranges may share a
  // file's checksummed chunk); RamTier hands out its own memory.
  virtual absl::Status VisitGrad(
      uint64_t offset, uint64_t n, bool write,
      const std::function<absl::Status(float* g)>& fn);

  // One AdamW step over every span with hypers[span.group] (hypers.size()
  // must be layout().num_groups()). Gradients are read, never changed.
  virtual absl::Status Step(const std::vector<AdamWHyper>& hypers) = 0;

  // Makes the current state durable (no-op in RAM).
  virtual absl::Status Flush() = 0;
  // Writes a checkpoint of p, m, v, serve into directory `dir` (created;
  // must not hold one already) that NvmeTier::Open can open.
  virtual absl::Status Snapshot(const std::string& dir) = 0;

  virtual TierStats Stats() const = 0;

 private:
  absl::Mutex visit_mu_;  // the default VisitGrad's reads and writes
};

}  // namespace storage
}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_STORAGE_TIER_H_
