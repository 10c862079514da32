// The server side of the data plane: Gather and PushGradients as gRPC
// callback handlers on raw byte buffers (proto/wire.h), so that payload
// bytes move between the store and gRPC's slices with one copy each way
// and no protobuf message in between:
//   * gather: the store writes each chunk straight into the buffer that
//     becomes the outgoing slice (the fields before it are encoded in
//     place);
//   * push: each chunk's payload is handed to the PushSession straight
//     from the received slices (through a small staging buffer only where
//     an element straddles two slices or a slice is not aligned to the
//     element size).
// A request naming a shared segment (v1::SharedRef; a client on this host,
// server/shared_memory.h) moves no payload through gRPC: a gather writes
// the whole range there and answers with one chunk carrying shared_bytes,
// a push's session reads the contribution from there.
// Behaviour (statuses, messages, counters, "a rejected request changes
// nothing") is the store's, exactly as with the generated protobuf
// handlers; bytes that do not parse as the request message are
// INVALID_ARGUMENT and counted as rejected.
//
// Stalled streams: a stream that makes no progress (no message received,
// no chunk taken by the client) for the idle timeout is cancelled by the
// server (IdleStreams, --stream_idle_timeout_seconds); a push stream's
// session then releases its reserved range, as it does at once when the
// client cancels or goes away.
//
// Ownership: gRPC owns each reactor once returned and it deletes itself in
// OnDone(). `store` and `idle` are not owned and must outlive the server.
// Threading: gRPC calls one reactor's callbacks one at a time; the store is
// thread-safe. Handlers never wait on anything but the store's locks.
#ifndef ZEROSHARD_SERVER_DATA_PLANE_H_
#define ZEROSHARD_SERVER_DATA_PLANE_H_

#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "server/shared_memory.h"
#include "server/store/shard_store.h"

namespace zeroshard {

// Cancels the streams it watches once they made no progress for
// `timeout`. A thread checks every min(timeout / 4, 1 s). Thread-safe.
class IdleStreams {
 public:
  // One watched stream (shared by the reactor and the checking thread).
  struct Watch;

  // `timeout` <= 0: never cancels (and starts no thread).
  explicit IdleStreams(absl::Duration timeout);
  ~IdleStreams();  // stops the thread; every stream must be unwatched
  IdleStreams(const IdleStreams&) = delete;
  IdleStreams& operator=(const IdleStreams&) = delete;

  absl::Duration timeout() const { return timeout_; }
  // Starts watching the call of `ctx` (until Unwatch).
  std::shared_ptr<Watch> Start(grpc::CallbackServerContext* ctx);
  // The stream made progress.
  static void Touch(Watch* w);
  // True once the stream was cancelled for being idle.
  static bool TimedOut(const Watch* w);
  // In the reactor's OnDone: the context is about to go.
  void Unwatch(const std::shared_ptr<Watch>& w);

 private:
  void Run();

  const absl::Duration timeout_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::shared_ptr<Watch>> watched_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<std::thread> thread_;
};

// Starts streaming the range `request` asks for (GatherRequest bytes).
// `idle` may be null (no idle deadline); `shared` null: requests naming a
// shared segment are refused (FAILED_PRECONDITION "shared memory: ...").
grpc::ServerWriteReactor<grpc::ByteBuffer>* NewGatherReactor(
    ShardStore* store, const grpc::ByteBuffer* request,
    grpc::CallbackServerContext* ctx = nullptr, IdleStreams* idle = nullptr,
    SharedSegments* shared = nullptr);

// Receives one contribution (PushGradientsRequest messages) and answers
// with PushGradientsResponse bytes in `response`.
grpc::ServerReadReactor<grpc::ByteBuffer>* NewPushReactor(
    ShardStore* store, grpc::ByteBuffer* response,
    grpc::CallbackServerContext* ctx = nullptr, IdleStreams* idle = nullptr,
    SharedSegments* shared = nullptr);

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_DATA_PLANE_H_
