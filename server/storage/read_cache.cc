#include "server/storage/read_cache.h"

#include <algorithm>

#include "common/status_macros.h"

namespace zeroshard {
namespace storage {

ReadCache::ReadCache(uint64_t capacity_bytes, uint64_t block_size,
                     MemoryAccount* account)
    : max_entries_(std::max<uint64_t>(1, capacity_bytes / block_size)),
      block_size_(block_size),
      account_(account) {}

absl::StatusOr<std::shared_ptr<const AlignedBuffer>> ReadCache::Get(
    uint64_t generation, const ArrayFile& file, uint64_t j) {
  const uint64_t key = Key(generation, j);
  {
    absl::MutexLock l(&mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      hits_.fetch_add(1);
      return it->second->data;
    }
  }
  misses_.fetch_add(1);
  auto buf = std::make_shared<AlignedBuffer>(block_size_, account_);
  ZS_RETURN_IF_ERROR(file.ReadChunk(j, buf->data()));
  absl::MutexLock l(&mu_);
  auto it = index_.find(key);
  if (it != index_.end()) return it->second->data;  // raced: keep the first
  lru_.push_front(Entry{key, buf});
  index_[key] = lru_.begin();
  while (lru_.size() > max_entries_) {
    index_.erase(lru_.back().key);
    lru_.pop_back();
  }
  return std::shared_ptr<const AlignedBuffer>(std::move(buf));
}

void ReadCache::Clear() {
  absl::MutexLock l(&mu_);
  index_.clear();
  lru_.clear();
}

}  // namespace storage
}  // namespace zeroshard
