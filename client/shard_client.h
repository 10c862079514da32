// ShardClient: what a worker (or any training job) embeds to talk to all K
// shard servers of a job at once.
//
//   ClientOptions opts;
//   opts.addresses = {"127.0.0.1:7000", "127.0.0.1:7001"};
//   ZS_ASSIGN_OR_RETURN(auto client, ShardClient::Connect(opts));
//   ZS_RETURN_IF_ERROR(client->RegisterModel(spec));   // plan + hash check
//   ZS_RETURN_IF_ERROR(client->WriteParameters(all, init.data()));
//   ... per step:
//   ZS_RETURN_IF_ERROR(client->Push(slice, v1::DTYPE_FP32, grads, id));
//   ZS_ASSIGN_OR_RETURN(StepNorm norm, client->Prepare(id.epoch, id.step));
//   ZS_RETURN_IF_ERROR(client->Commit(id.epoch, id.step, clip, lr, skip));
//   ZS_RETURN_IF_ERROR(client->Gather(all, v1::DTYPE_FP32, params, &step));
//
// Any flat range is split across the servers that own it (PartitionPlan)
// and the pieces travel concurrently, one stream per piece, in chunks of at
// most 1 MiB. Gather and Push exchange raw gRPC byte buffers in the
// protocol's wire format (proto/wire.h): a gathered chunk is copied once,
// from gRPC's receive slices into the caller's buffer; a pushed chunk is
// sent from the caller's buffer without any copy in this process.
//
// Processes that move much data should call TuneMallocForTransfers()
// (common/malloc_tuning.h) at the start of main().
//
// Every RPC has a deadline (options.deadline); UNAVAILABLE,
// DEADLINE_EXCEEDED and ABORTED are retried with exponential backoff up to
// options.max_attempts; a retry goes as soon as a server whose connection
// failed is connected again (WaitToRetry). Retrying is safe: pushes carry
// idempotency keys, prepare is read-only, commits are acknowledged once
// applied. Other errors come back at once with the server's message, prefixed
// by its address.
//
// Threading: all methods are thread-safe. The *Async variants return a
// future; the caller's buffer must stay alive until it is ready.
#ifndef ZEROSHARD_CLIENT_SHARD_CLIENT_H_
#define ZEROSHARD_CLIENT_SHARD_CLIENT_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "client/shared_memory.h"
#include "common/malloc_tuning.h"
#include "common/partition.h"
#include "grpcpp/channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/client_interceptor.h"
#include "proto/zeroshard.grpc.pb.h"

namespace zeroshard {

struct ClientOptions {
  std::vector<std::string> addresses;         // shard k at addresses[k]
  std::chrono::milliseconds deadline{60000};  // per RPC attempt
  // Ten attempts: with the backoff below they span ~5 s (a
  // restarting server), and on a link losing one call in five they all
  // fail about once in 10^7 calls.
  int max_attempts = 10;
  std::chrono::milliseconds initial_backoff{10};
  std::chrono::milliseconds max_backoff{2000};
  // gRPC channels (TCP connections) per server; pieces are spread over
  // them.
  int channels_per_server = 2;
  // Largest piece one stream carries; larger pieces are split so that
  // several streams share the work.
  uint64_t max_piece_bytes = 64ull << 20;
  // The same through shared memory, where each piece is one request and
  // each request's copy runs on one thread at each end: smaller pieces
  // copy on more cores at once.
  uint64_t max_shared_piece_bytes = 16ull << 20;
  // Gathers and pushes to servers at loopback addresses (127.0.0.0/8,
  // [::1], localhost, unix:) move their bytes through shared memory
  // (client/shared_memory.h, docs/shared_memory.md) instead of gRPC and
  // the TCP stack; a server that refuses (another host behind a forwarded
  // port, another pid namespace, --shared_memory=false) is reached over
  // the stream from then on. false: always the stream; so does
  // ZEROSHARD_SHARED_MEMORY=0 in the environment (Connect reads it).
  bool shared_memory = true;
  // Channel credentials (TLS); null means plaintext.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // Called once per channel; the interceptors it returns (per-call
  // credentials, fault injection, ...) run on every call in order.
  std::function<std::vector<
      std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>()>
      interceptors;
};

// Identifies one contribution: the server keys it with
// "<key_prefix>/<offset>" so a retried push is applied once.
struct PushId {
  uint64_t epoch = 0;
  uint64_t step = 0;
  uint32_t slot = 0;
  std::string key_prefix;  // unique per (worker, step, bucket)
};

// The combined answer of every server's PrepareStep.
struct StepNorm {
  double sum_squares = 0;  // summed over servers in shard order
  bool overflow = false;
  double norm() const;
};

class ShardClient {
 public:
  static absl::StatusOr<std::unique_ptr<ShardClient>> Connect(
      ClientOptions options);

  uint32_t num_servers() const {
    return static_cast<uint32_t>(options_.addresses.size());
  }
  const ClientOptions& options() const { return options_; }

  // Registers `spec` on every server and checks that each computed the same
  // plan (hash) as this client. Idempotent: registering (or UseSpec of)
  // the spec in use again keeps the plan object, so threads reading plan()
  // meanwhile are safe; a different spec replaces it (no other call may
  // run then).
  absl::Status RegisterModel(const v1::ModelSpec& spec);
  // The plan of the registered model (RegisterModel first).
  const PartitionPlan& plan() const { return *plan_; }
  const v1::ModelSpec& spec() const { return spec_; }
  // Uses `spec` (already registered by someone else) without any RPC:
  // for admin tools and late joiners. INVALID_ARGUMENT if it is malformed.
  absl::Status UseSpec(const v1::ModelSpec& spec);
  // Fetches the registered spec from shard 0 and uses it (UseSpec).
  // FAILED_PRECONDITION when no model is registered yet.
  absl::Status AttachToRegistered();
  // Flat range of the tensor named `name`, or NOT_FOUND.
  absl::StatusOr<Range> TensorRange(const std::string& name) const;

  // Writes fp32 master weights for `r` (e.g. initial weights).
  absl::Status WriteParameters(const Range& r, const float* data);

  // Gathers `r` in `dtype` into `out` (r.size() × dtype bytes). `step` (if
  // not null) receives the step the data reflects; all servers must agree,
  // else ABORTED.
  absl::Status Gather(const Range& r, v1::DType dtype, void* out,
                      uint64_t* step = nullptr);
  // Gathers every range of `ranges` into the matching `outs` at once (every
  // server piece of every range concurrently), with one step check across
  // all of them: as Gather, for scattered ranges. Over the stream, a
  // server's small pieces (up to max_piece_bytes together) go in one
  // request (GatherRequest.more); through shared memory, one request per
  // piece. INVALID_ARGUMENT when the two spans differ in size.
  absl::Status GatherRanges(absl::Span<const Range> ranges, v1::DType dtype,
                            absl::Span<void* const> outs,
                            uint64_t* step = nullptr);
  // Gather requests sent so far (every attempt; for tests and stats).
  uint64_t gather_requests() const { return gather_requests_.load(); }

  // Pushes the gradient of `r` (r.size() elements of `dtype` at `data`).
  // `r` must start and end on the plan's alignment (or Ψ).
  absl::Status Push(const Range& r, v1::DType dtype, const void* data,
                    const PushId& id);
  // Push on a helper thread. The future does not wait in its destructor
  // (it is not std::async's): wait for it before `data` goes away or the
  // client is destroyed.
  std::future<absl::Status> PushAsync(const Range& r, v1::DType dtype,
                                      const void* data, PushId id);

  // Polls every server until all contributions of the step are in (or the
  // deadline passes: DEADLINE_EXCEEDED), then combines the norm partials.
  absl::StatusOr<StepNorm> Prepare(uint64_t epoch, uint64_t step);
  // Commits the step on every server (in shard order). `state` (if not
  // null): the workers' state after the step, kept by the servers for
  // checkpoints taken from outside the job. `prepare`: each server
  // prepares the step first if needed (CommitStepRequest.prepare), so a
  // caller that needs no norm skips Prepare's round trip.
  absl::Status Commit(uint64_t epoch, uint64_t step, float clip_coef, double lr,
                      bool skip, const v1::TrainerState* state = nullptr,
                      bool prepare = false);

  // Checkpoints committed step `step` on every server: each writes its
  // shard file, then each writes the manifest listing all of them. `state`
  // null: the state the servers kept from the last commit. Returns the
  // shard files in shard order; `paths` (if not null) receives each
  // server's path of its shard file. Servers need --checkpoint_dir.
  absl::StatusOr<std::vector<v1::CheckpointShard>> Checkpoint(
      uint64_t step, const v1::TrainerState* state, const std::string& tag = "",
      std::vector<std::string>* paths = nullptr);
  // Restores checkpoint `step` (0: each server's newest) on every server
  // with epoch `epoch`; returns the trainer state recorded in it (DATA_LOSS
  // if the servers disagree on the step). `resume`: every server keeps its
  // state, which must be at `step` (RestoreRequest.resume).
  absl::StatusOr<v1::TrainerState> Restore(uint64_t step, uint64_t epoch,
                                           bool resume = false);

  // Every server's GetStats (admin); `ledger`: with its commit ledger.
  absl::StatusOr<std::vector<v1::GetStatsResponse>> Stats(bool ledger = false);

  // The channel of server `server` picked by `salt`, with the job's
  // credentials and interceptors: for the raw data plane and for other
  // services' stubs (e.g. MembershipService on Channel(0, 0)).
  const std::shared_ptr<grpc::Channel>& Channel(uint32_t server,
                                                uint64_t salt) const;

  // Whether gathers and pushes to `server` go through shared memory now.
  bool SharedMemoryOn(uint32_t server) const;

 private:
  explicit ShardClient(ClientOptions options);
  // Installs `spec` and its `plan` unless `spec` is the one in use.
  void SetSpec(const v1::ModelSpec& spec, PartitionPlan plan);
  v1::ShardService::Stub* Stub(uint32_t server, uint64_t salt) const;
  // Runs `attempt` until it succeeds, fails permanently or runs out of
  // attempts; `what` names the call in errors.
  absl::Status WithRetries(
      uint32_t server, const std::string& what,
      const std::function<grpc::Status(grpc::ClientContext*)>& attempt) const;
  // Between two attempts on `server`: `backoff`, or less once a channel of
  // the server that had no connection has one again.
  void WaitToRetry(uint32_t server, std::chrono::milliseconds backoff) const;
  // Splits `r` into per-server pieces of at most max_piece_bytes;
  // max_shared_piece_bytes where `shared` (a gather's or a push's pieces)
  // and the server is reached through shared memory.
  std::vector<ShardPiece> Pieces(const Range& r, size_t esize,
                                 bool shared = true) const;
  // `salt` picks the channel, so pieces spread over the connections.
  // Ranges of one server (non-empty list) into `outs`, one stream
  // (GatherRequest.more after the first).
  absl::Status GatherStream(uint32_t server, const std::vector<Range>& ranges,
                            const std::vector<char*>& outs, size_t salt,
                            v1::DType dtype, uint64_t* step) const;
  absl::Status GatherPiece(const ShardPiece& piece, size_t salt,
                           v1::DType dtype, char* out, uint64_t* step) const;
  absl::Status PushPiece(const ShardPiece& piece, size_t salt, v1::DType dtype,
                         const char* data, const PushId& id) const;
  // The same through a shared segment; *refused: the server (or this
  // host) cannot, and shared memory is now off for that server.
  absl::Status GatherShared(const ShardPiece& piece, size_t salt,
                            v1::DType dtype, char* out, uint64_t* step,
                            bool* refused) const;
  absl::Status PushShared(const ShardPiece& piece, size_t salt, v1::DType dtype,
                          const char* data, const v1::PushHeader& header,
                          bool* refused) const;
  // Turns shared memory off for `server`, saying why once.
  void SharedMemoryOff(uint32_t server, const absl::Status& why) const;

  const ClientOptions options_;
  // channels_[server][channel], and a stub on each
  std::vector<std::vector<std::shared_ptr<grpc::Channel>>> channels_;
  std::vector<std::vector<std::unique_ptr<v1::ShardService::Stub>>> stubs_;
  // Shared memory: the segments (null: off for every server) and, per
  // server, whether it is on.
  std::unique_ptr<SegmentPool> segments_;
  std::unique_ptr<std::atomic<bool>[]> shared_on_;
  std::unique_ptr<PartitionPlan> plan_;
  v1::ModelSpec spec_;
  mutable std::atomic<uint64_t> gather_requests_{0};
};

// Converts a gRPC status to absl, prefixing the message with `context`.
absl::Status FromGrpcStatus(const grpc::Status& status,
                            const std::string& context);

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_SHARD_CLIENT_H_
