// TuneMallocForTransfers: glibc malloc settings for a process that streams
// large payloads through gRPC (shard servers, workers, benchmarks).
//
// gRPC receives and sends ~1 MiB messages in buffers it allocates per
// message. With glibc's defaults each such buffer is mmap'ed (or lands in a
// per-thread arena whose heap is unmapped when it empties), so every byte
// received is written into freshly faulted, zeroed pages: measured 140-190
// page faults per MiB gathered, a large share of the client's CPU. This
// keeps freed buffers in one heap for reuse:
//   M_MMAP_THRESHOLD 16 MiB  (buffers up to 16 MiB come from the heap)
//   M_TRIM_THRESHOLD 1 GiB   (freed memory is not returned at once)
//   M_TOP_PAD        64 MiB  (the heap grows in large steps)
//   M_ARENA_MAX      1       (every thread allocates from the main heap)
// The cost: up to ~1 GiB of freed heap may stay mapped, and threads share
// one malloc lock (uncontended in practice: allocations are per message,
// not per element).
//
// Opt-in: a main() calls it once, first thing, before starting threads or
// gRPC. Nothing calls it behind the caller's back (libraries embedding
// ShardClient keep their process's malloc settings). Not thread-safe
// against concurrent allocation from other threads. Does nothing on
// non-glibc systems. Returns false if glibc refused a setting.
#ifndef ZEROSHARD_COMMON_MALLOC_TUNING_H_
#define ZEROSHARD_COMMON_MALLOC_TUNING_H_

namespace zeroshard {

bool TuneMallocForTransfers();

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_MALLOC_TUNING_H_
