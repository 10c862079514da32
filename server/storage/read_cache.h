// ReadCache: a bounded LRU cache of verified chunks (the serving copy that
// gathers read), keyed by (generation, chunk). At most
// max(1, capacity_bytes / block_size) chunks are held; a chunk being copied
// out stays alive (shared_ptr) even if evicted meanwhile.
//
// Threading: thread-safe. A miss reads outside the lock, so concurrent
// misses on different chunks proceed in parallel (a chunk missed twice at
// once may be read twice; one copy is kept).
#ifndef ZEROSHARD_SERVER_STORAGE_READ_CACHE_H_
#define ZEROSHARD_SERVER_STORAGE_READ_CACHE_H_

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/storage/array_file.h"
#include "server/storage/buffer.h"

namespace zeroshard {
namespace storage {

class ReadCache {
 public:
  // Buffers are counted in `account` (not owned, may be null).
  ReadCache(uint64_t capacity_bytes, uint64_t block_size,
            MemoryAccount* account);

  // The contents of chunk j of `file` (generation `generation`), read and
  // verified on a miss.
  absl::StatusOr<std::shared_ptr<const AlignedBuffer>> Get(
      uint64_t generation, const ArrayFile& file, uint64_t j)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Drops every entry (after a commit made them stale).
  void Clear() ABSL_LOCKS_EXCLUDED(mu_);

  uint64_t hits() const { return hits_.load(); }
  uint64_t misses() const { return misses_.load(); }

 private:
  struct Entry {
    uint64_t key;
    std::shared_ptr<const AlignedBuffer> data;
  };
  static uint64_t Key(uint64_t generation, uint64_t j) {
    return (generation << 40) ^ j;
  }

  const size_t max_entries_;
  const uint64_t block_size_;
  MemoryAccount* const account_;
  absl::Mutex mu_;
  std::list<Entry> lru_ ABSL_GUARDED_BY(mu_);  // front = most recent
  std::unordered_map<uint64_t, std::list<Entry>::iterator> index_
      ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> hits_{0};
  std::atomic<uint64_t> misses_{0};
};

}  // namespace storage
}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_STORAGE_READ_CACHE_H_
