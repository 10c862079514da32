// IoEngine: `threads` I/O threads (DeepSpeed's aio intra_op_parallelism),
// each driving its own IoQueue of `queue_depth` requests (aio queue_depth).
// Callers hand over batches of requests and wait for a batch as a whole, so
// the optimizer thread computes while the kernel moves data.
//
// Example:
//   IoBatch batch;
//   engine->Submit({{IoOp::kRead, file, 0, buf, 1 << 20}}, &batch);
//   ... compute ...
//   ZS_RETURN_IF_ERROR(batch.Wait());
//
// Ownership: requests' buffers and files, and the IoBatch, must stay alive
// until the batch's Wait() has returned. The request `tag` is overwritten.
// Threading: Submit may be called from any thread; a batch is waited on by
// one thread. Destroying the engine waits for all requests submitted.
#ifndef ZEROSHARD_SERVER_STORAGE_IO_ENGINE_H_
#define ZEROSHARD_SERVER_STORAGE_IO_ENGINE_H_

#include <atomic>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/env/env.h"

namespace zeroshard {
namespace storage {

class IoBatch {
 public:
  IoBatch() = default;
  ~IoBatch() { Wait().IgnoreError(); }
  IoBatch(const IoBatch&) = delete;
  IoBatch& operator=(const IoBatch&) = delete;

  // Blocks until every request added so far has completed; returns the
  // first error since the previous Wait (all requests still complete
  // before it returns), else OK. The batch can then be reused.
  absl::Status Wait() ABSL_LOCKS_EXCLUDED(mu_);
  bool done() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  friend class IoEngine;
  void Add(int n) ABSL_LOCKS_EXCLUDED(mu_);
  void Done(const absl::Status& s) ABSL_LOCKS_EXCLUDED(mu_);

  mutable absl::Mutex mu_;
  int remaining_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

class IoEngine {
 public:
  // INVALID_ARGUMENT unless threads >= 1 and queue_depth >= 1; errors of
  // Env::NewIoQueue otherwise.
  static absl::StatusOr<std::unique_ptr<IoEngine>> Create(Env* env, int threads,
                                                          int queue_depth);
  ~IoEngine();
  IoEngine(const IoEngine&) = delete;
  IoEngine& operator=(const IoEngine&) = delete;

  void Submit(const std::vector<IoRequest>& requests, IoBatch* batch)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Bytes moved by successful requests since creation.
  uint64_t bytes_read() const { return bytes_read_.load(); }
  uint64_t bytes_written() const { return bytes_written_.load(); }

 private:
  struct Item {
    IoRequest request;
    IoBatch* batch;
  };
  IoEngine() = default;
  void Loop(IoQueue* queue) ABSL_LOCKS_EXCLUDED(mu_);
  void Complete(const Item& item, const absl::Status& s);

  absl::Mutex mu_;
  std::deque<Item> pending_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::unique_ptr<IoQueue>> queues_;
  std::vector<std::thread> threads_;
  std::atomic<uint64_t> bytes_read_{0};
  std::atomic<uint64_t> bytes_written_{0};
};

}  // namespace storage
}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_STORAGE_IO_ENGINE_H_
