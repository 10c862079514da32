// Internals of ShardStore shared by its two source files (shard_store.cc:
// registration and the step; shard_store_checkpoint.cc: checkpoints).
#ifndef ZEROSHARD_SERVER_STORE_SHARD_STORE_INTERNAL_H_
#define ZEROSHARD_SERVER_STORE_SHARD_STORE_INTERNAL_H_

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "server/store/shard_store.h"

namespace zeroshard {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// 64-byte aligned, uninitialised.
template <typename T>
std::unique_ptr<T[], FreeDeleter> AllocateAligned(uint64_t n) {
  const size_t bytes = ((n * sizeof(T) + 63) / 64) * 64;
  void* p = std::aligned_alloc(64, bytes == 0 ? 64 : bytes);
  return std::unique_ptr<T[], FreeDeleter>(static_cast<T*>(p));
}

// The RAM state (without a tier): master, m, v, serve; slot gradients.
struct ShardStore::Buffers {
  std::unique_ptr<float[], FreeDeleter> master, m, v;
  std::vector<std::unique_ptr<float[], FreeDeleter>> grads;  // one per slot
  std::unique_ptr<uint16_t[], FreeDeleter> serve;
  uint64_t bytes = 0;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_STORE_SHARD_STORE_INTERNAL_H_
