// The object behind a zs_client handle: a ShardClient, the job id, and
// whether a model is registered.
//
// Threading: ShardClient is thread-safe, and its plan, once set, is never
// replaced (registering the same spec again keeps it; a client takes one
// model). So after registered() turns true every thread may read plan()
// without a lock; zs_register and zs_attach are serialised by
// register_mu().
#ifndef ZEROSHARD_CLIENT_CAPI_CLIENT_HANDLE_H_
#define ZEROSHARD_CLIENT_CAPI_CLIENT_HANDLE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client/capi/handles.h"
#include "client/shard_client.h"
#include "common/partition.h"

namespace zeroshard::capi {

class ClientHandle : public Handle {
 public:
  static constexpr Kind kKind = Kind::kClient;

  ClientHandle(std::unique_ptr<ShardClient> client, std::string job_id)
      : Handle(kKind), client_(std::move(client)), job_id_(std::move(job_id)) {}

  ShardClient* client() const { return client_.get(); }
  const std::string& job_id() const { return job_id_; }

  absl::Mutex* register_mu() { return &register_mu_; }
  bool registered() const {
    return registered_.load(std::memory_order_acquire);
  }
  // After RegisterModel/UseSpec succeeded (under register_mu()).
  void set_registered() { registered_.store(true, std::memory_order_release); }
  // The registered model's plan, or FAILED_PRECONDITION saying to call
  // zs_register or zs_attach first.
  absl::StatusOr<const PartitionPlan*> Plan() const;

  // Pushes: a successful zs_push records its (epoch, step); a trainer asks
  // whether anything was pushed for the step it is about to make.
  void RecordPush(uint64_t epoch, uint64_t step) ABSL_LOCKS_EXCLUDED(push_mu_);
  bool PushedFor(uint64_t epoch, uint64_t step) const
      ABSL_LOCKS_EXCLUDED(push_mu_);

 private:
  const std::unique_ptr<ShardClient> client_;
  const std::string job_id_;
  absl::Mutex register_mu_;
  std::atomic<bool> registered_{false};

  mutable absl::Mutex push_mu_;
  bool any_push_ ABSL_GUARDED_BY(push_mu_) = false;
  uint64_t push_epoch_ ABSL_GUARDED_BY(push_mu_) = 0;
  uint64_t push_step_ ABSL_GUARDED_BY(push_mu_) = 0;
};

// INVALID_ARGUMENT unless `dtype` is ZS_DTYPE_FP32/BF16/FP16; its size.
absl::StatusOr<size_t> DTypeBytes(int dtype);

// OUT_OF_RANGE unless [offset, offset + count) lies in the model.
absl::Status CheckRange(const PartitionPlan& plan, uint64_t offset,
                        uint64_t count);

// INVALID_ARGUMENT unless `data` (named `name`) holds exactly `count`
// elements of `esize` bytes in `bytes`; NULL is allowed for count 0.
absl::Status CheckBuffer(const void* data, size_t bytes, uint64_t count,
                         size_t esize, const char* name);

}  // namespace zeroshard::capi

#endif  // ZEROSHARD_CLIENT_CAPI_CLIENT_HANDLE_H_
