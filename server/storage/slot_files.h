// The gradient slots of a shard store beyond the first, in files (issue 9):
// with several contributions per step (contributions_per_step = S > 1) and
// the NVMe tier, slot 0 is the tier's own gradient accumulator and slots
// 1..S-1 live here, one file of n fp32 each, so the server's RAM does not
// grow with S × the model. The store sums the slots in slot order at
// Prepare, as it does in RAM, so the result is the same bit for bit.
//
// Layout: DIR/slot-<s>.f32 (created or reused, reserved with fallocate;
// scratch, never read before written in a step: every slot is covered
// once per step before Prepare reduces it).
//
// Threading: Write and Read of disjoint ranges may run concurrently (the
// Env's files are positional). Errors: the Env's (RESOURCE_EXHAUSTED when
// the device is full, naming the file).
#ifndef ZEROSHARD_SERVER_STORAGE_SLOT_FILES_H_
#define ZEROSHARD_SERVER_STORAGE_SLOT_FILES_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/env/env.h"

namespace zeroshard {
namespace storage {

class SlotFiles {
 public:
  // Slots 1..slots-1 of n elements under `dir` (created if missing).
  // INVALID_ARGUMENT for slots < 2.
  static absl::StatusOr<std::unique_ptr<SlotFiles>> Create(
      Env* env, const std::string& dir, uint32_t slots, uint64_t n);

  // Slot `slot` (1 <= slot < slots) at element `offset`.
  absl::Status Write(uint32_t slot, uint64_t offset, const float* data,
                     uint64_t count);
  absl::Status Read(uint32_t slot, uint64_t offset, uint64_t count, float* out);

  uint64_t bytes_read() const { return bytes_read_.load(); }
  uint64_t bytes_written() const { return bytes_written_.load(); }

 private:
  SlotFiles() = default;
  absl::StatusOr<File*> FileOf(uint32_t slot, uint64_t offset, uint64_t count);

  uint64_t n_ = 0;
  std::vector<std::unique_ptr<File>> files_;  // [s - 1] for slot s
  std::atomic<uint64_t> bytes_read_{0}, bytes_written_{0};
};

}  // namespace storage
}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_STORAGE_SLOT_FILES_H_
