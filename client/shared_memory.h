// The client's side of the shared-memory data plane (server/shared_memory.h,
// docs/shared_memory.md): a pool of memfd segments, each sealed against
// shrinking and stamped with a random token, lent to one Gather or push
// piece at a time. The server maps a segment the first time a request
// names it; the bytes then skip gRPC and the TCP stack.
//
//   ZS_ASSIGN_OR_RETURN(SegmentPool::Lease lease, pool.Acquire(bytes));
//   std::memcpy(lease.data(), src, bytes);     // a push
//   request.mutable_shared()->CopyFrom(lease.ref());
//   ... on an error after which the server might still write: Discard().
//
// Segments are sized to powers of two from 1 MiB and kept for reuse while
// free (up to 1 GiB of them); a segment lent out is never lent twice.
// Destroying the pool unmaps and closes the free ones (leases must be gone
// first). A segment lives as long as this process or a server's mapping of it
// does; nothing is left in any file system.
//
// Threading: Acquire and the leases' destructors are thread-safe.
#ifndef ZEROSHARD_CLIENT_SHARED_MEMORY_H_
#define ZEROSHARD_CLIENT_SHARED_MEMORY_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/zeroshard.pb.h"

namespace zeroshard {

class SegmentPool {
 public:
  struct Segment;

  // One segment lent to one call.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&& other) noexcept;
    ~Lease();

    // Room for the bytes asked for, 64-byte aligned.
    char* data() const;
    // Names data() for the server.
    const v1::SharedRef& ref() const;
    // The server may still touch the segment (a call that failed midway):
    // it goes when the lease does and is never lent again.
    void Discard() { discard_ = true; }

   private:
    friend class SegmentPool;
    Lease(SegmentPool* pool, std::unique_ptr<Segment> segment);
    void Release();

    SegmentPool* pool_ = nullptr;
    std::unique_ptr<Segment> segment_;
    bool discard_ = false;
  };

  SegmentPool();
  ~SegmentPool();
  SegmentPool(const SegmentPool&) = delete;
  SegmentPool& operator=(const SegmentPool&) = delete;

  // A segment with room for `bytes`; an error when the OS refuses one
  // (memfd_create, sealing or mapping failed).
  absl::StatusOr<Lease> Acquire(uint64_t bytes);

  // Segments made so far (tests).
  uint64_t created() const;

 private:
  void Return(std::unique_ptr<Segment> segment);

  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Segment>> free_ ABSL_GUARDED_BY(mu_);
  uint64_t created_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_SHARED_MEMORY_H_
