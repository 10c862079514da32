// PushSession: one contribution streaming into a shard's state
// (shard_state.h). Created by ShardStore::BeginPush once the step ledger
// admitted it, fed chunks in order, then Finish()ed; destroying it
// unfinished releases its range and applies nothing (elements already
// written are never visible: the step cannot be prepared until a finished
// push covers them again, and each push overwrites its whole range). A
// push of a newer epoch (PushClaim::adopts_epoch) may cover ranges the
// unfinished step already received, so it is staged in memory (at most
// its range, as fp32, grown only as data arrives) and written only once it
// arrived whole and the ledger adopted its epoch. It reports to its owner
// (the store) through PushOwner.
//
// Threading: not thread-safe (one stream feeds it); sessions of disjoint
// ranges run concurrently. Errors: INVALID_ARGUMENT for a malformed chunk
// (counted as a rejected request); the storage's for a failed write.
#ifndef ZEROSHARD_SERVER_STORE_PUSH_SESSION_H_
#define ZEROSHARD_SERVER_STORE_PUSH_SESSION_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "proto/zeroshard.pb.h"
#include "server/storage/tier.h"
#include "server/store/shard_state.h"
#include "server/store/step_ledger.h"

namespace zeroshard {

// What a session tells the store it belongs to (thread-safe).
class PushOwner {
 public:
  virtual ~PushOwner() = default;
  // The claim's stream delivered every element, or broke off.
  virtual void PushFinished(const PushClaim& claim) = 0;
  // A staged claim (adopts_epoch) arrived whole: StepLedger::AdoptEpoch.
  virtual absl::Status PushAdoptEpoch(PushClaim* claim) = 0;
  virtual void PushReleased(const PushClaim& claim) = 0;
  // Counts a rejected request and returns `s`; counts pushed bytes.
  virtual absl::Status PushRejected(absl::Status s) = 0;
  virtual void PushedBytes(uint64_t bytes) = 0;
};

class PushSession {
 public:
  ~PushSession();
  PushSession(const PushSession&) = delete;
  PushSession& operator=(const PushSession&) = delete;

  // True when the key was already applied: the caller acknowledges without
  // reading further data.
  bool duplicate() const { return duplicate_; }
  uint64_t length() const { return length_; }

  // Converts one chunk (`data` aligned to the element size) to fp32 into
  // the slot's gradient. A duplicate or finished session ignores chunks.
  // INVALID_ARGUMENT when it is larger than kMaxChunkBytes, not a whole
  // number of elements, or runs past the header's length.
  absl::Status AddChunk(const void* data, size_t bytes);

  // Marks the contribution received. INVALID_ARGUMENT if fewer elements
  // arrived than the header announced.
  absl::Status Finish();

 private:
  friend class ShardStore;
  // A duplicate to acknowledge (no claim), until ShardStore sets claim_
  // and offset_ (owned-relative) of a new contribution into `state`.
  PushSession(PushOwner* owner, ShardState* state, uint64_t length,
              v1::DType dtype)
      : owner_(owner), state_(state), length_(length), dtype_(dtype) {}

  PushOwner* const owner_;
  ShardState* const state_;
  const uint64_t length_;
  const v1::DType dtype_;
  bool duplicate_ = true;
  bool finished_ = false;
  PushClaim claim_;
  uint64_t offset_ = 0;    // owned-relative start of the claim
  uint64_t received_ = 0;  // elements so far
  // Made at the first chunk (outside the store's locks).
  std::unique_ptr<storage::GradWriter> writer_;
  std::vector<float> converted_;  // a chunk in fp32 (bf16/fp16 pushes)
  // The chunks of a staged claim, in fp32, until Finish (allocated
  // without throwing: RESOURCE_EXHAUSTED when refused).
  struct StagedChunk {
    std::unique_ptr<float[]> data;
    uint64_t n = 0;
  };
  std::vector<StagedChunk> staged_;

  // Writes `n` fp32 elements to the gradient (the writer made at first).
  absl::Status Write(const float* data, uint64_t n);
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_STORE_PUSH_SESSION_H_
