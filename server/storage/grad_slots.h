// The gradients of contributions 1..S-1 of a shard's step (a ModelSpec with
// contributions_per_step = S > 1; contribution 0 goes to the storage tier's
// own accumulator, tier.h). The store sums them into the tier's gradient in
// slot order at Prepare, so the result does not depend on the order in
// which contributions arrived and is the same bit for bit wherever the
// slots live:
//   RAM       NewRamGradSlots: one fp32 buffer of n per slot;
//   SlotFiles on disk with the NVMe tier, so that the server's RAM does not
//             grow with S × the model: DIR/slot-<s>.f32 (created or reused,
//             reserved with fallocate; scratch, never read before written
//             in a step: every slot is covered once per step before
//             Prepare reduces it).
//
// Threading: Write and AddInto of disjoint ranges may run concurrently.
// Errors: INVALID_ARGUMENT for a slot or range outside the slots; the Env's
// for files (RESOURCE_EXHAUSTED when the device is full, naming the file).
#ifndef ZEROSHARD_SERVER_STORAGE_GRAD_SLOTS_H_
#define ZEROSHARD_SERVER_STORAGE_GRAD_SLOTS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/env/env.h"
#include "server/storage/tier.h"

namespace zeroshard {
namespace storage {

class GradSlots {
 public:
  virtual ~GradSlots() = default;
  // Overwrites slot `slot` (1 <= slot < S) at [offset, offset + count).
  virtual absl::Status Write(uint32_t slot, uint64_t offset, const float* data,
                             uint64_t count) = 0;
  // g[i] += slot[offset + i] for i in [0, count), in fp32.
  virtual absl::Status AddInto(uint32_t slot, uint64_t offset, uint64_t count,
                               float* g) = 0;
  // RAM held; bytes moved to and from files (zero in RAM).
  virtual uint64_t bytes_held() const = 0;
  virtual uint64_t bytes_read() const { return 0; }
  virtual uint64_t bytes_written() const { return 0; }
};

// Slots 1..slots-1 of n elements in RAM (zeroed). RESOURCE_EXHAUSTED,
// naming the bytes, when the memory is refused.
absl::StatusOr<std::unique_ptr<GradSlots>> NewRamGradSlots(uint32_t slots,
                                                           uint64_t n);

// A writer of slot `slot` over [offset, offset + n) from elements appended
// in order (one push stream); `slots` must outlive it.
std::unique_ptr<GradWriter> NewSlotWriter(GradSlots* slots, uint32_t slot,
                                          uint64_t offset, uint64_t n);

class SlotFiles : public GradSlots {
 public:
  // Slots 1..slots-1 of n elements under `dir` (created if missing).
  // INVALID_ARGUMENT for slots < 2.
  static absl::StatusOr<std::unique_ptr<SlotFiles>> Create(
      Env* env, const std::string& dir, uint32_t slots, uint64_t n);

  absl::Status Write(uint32_t slot, uint64_t offset, const float* data,
                     uint64_t count) override;
  absl::Status AddInto(uint32_t slot, uint64_t offset, uint64_t count,
                       float* g) override;
  uint64_t bytes_held() const override { return 0; }
  uint64_t bytes_read() const override { return bytes_read_.load(); }
  uint64_t bytes_written() const override { return bytes_written_.load(); }

 private:
  SlotFiles() = default;
  absl::StatusOr<File*> FileOf(uint32_t slot, uint64_t offset, uint64_t count);

  uint64_t n_ = 0;
  std::vector<std::unique_ptr<File>> files_;  // [s - 1] for slot s
  std::atomic<uint64_t> bytes_read_{0}, bytes_written_{0};
};

}  // namespace storage
}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_STORAGE_GRAD_SLOTS_H_
