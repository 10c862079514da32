// RamTier: the whole state in RAM (p, m, v, g as fp32, serve as 16 bits:
// 18 bytes per element), allocated at creation (RESOURCE_EXHAUSTED, naming
// the bytes, when the memory is refused). Step is one AdamW pass over
// the spans on the thread pool. The reference the NVMe tier is compared to.
//
// Snapshot is UNIMPLEMENTED (a RAM store checkpoints through the store).
// Threading: see tier.h; Read* take a shared lock, Step an exclusive one.
#ifndef ZEROSHARD_SERVER_STORAGE_RAM_TIER_H_
#define ZEROSHARD_SERVER_STORAGE_RAM_TIER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/thread_pool.h"
#include "server/storage/buffer.h"
#include "server/storage/tier.h"

namespace zeroshard {
namespace storage {

class RamTier : public StorageTier {
 public:
  // `pool` (may be null) is not owned and must outlive the tier.
  // RESOURCE_EXHAUSTED when the arrays cannot be allocated.
  static absl::StatusOr<std::unique_ptr<RamTier>> Create(
      const TierLayout& layout, ThreadPool* pool);

  const TierLayout& layout() const override { return layout_; }
  absl::Status WriteMaster(uint64_t offset, const float* data,
                           uint64_t n) override;
  absl::Status ReadMaster(uint64_t offset, uint64_t n, float* out) override;
  absl::Status ReadMoments(uint64_t offset, uint64_t n, float* m,
                           float* v) override;
  absl::Status WriteMoments(uint64_t offset, const float* m, const float* v,
                            uint64_t n) override;
  absl::Status ReadServing(uint64_t offset, uint64_t n, uint16_t* out,
                           uint64_t* step) override;
  absl::Status WriteGrad(uint64_t offset, const float* data,
                         uint64_t n) override;
  absl::Status AddGrad(uint64_t offset, const float* data, uint64_t n) override;
  absl::Status ReadGrad(uint64_t offset, uint64_t n, float* out) override;
  absl::Status ZeroGrad() override;
  absl::Status VisitGrad(
      uint64_t offset, uint64_t n, bool write,
      const std::function<absl::Status(float* g)>& fn) override;
  absl::Status Step(const std::vector<AdamWHyper>& hypers) override;
  absl::Status Flush() override { return absl::OkStatus(); }
  absl::Status Snapshot(const std::string& dir) override;
  TierStats Stats() const override;

 private:
  RamTier(const TierLayout& layout, ThreadPool* pool);
  absl::Status CheckRange(uint64_t offset, uint64_t n) const;

  const TierLayout layout_;
  ThreadPool* const pool_;
  MemoryAccount account_;
  mutable absl::Mutex mu_;
  AlignedBuffer p_, m_, v_, g_, serve_;
  uint64_t steps_ ABSL_GUARDED_BY(mu_) = 0;
  double last_step_seconds_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace storage
}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_STORAGE_RAM_TIER_H_
