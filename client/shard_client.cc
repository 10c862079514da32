#include "client/shard_client.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/grpc_quirks.h"
#include "common/helper_threads.h"
#include "common/hostname.h"
#include "common/model_spec.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "proto/wire.h"

namespace zeroshard {
namespace {

constexpr char kGatherMethod[] = "/zeroshard.v1.ShardService/Gather";
constexpr char kPushMethod[] = "/zeroshard.v1.ShardService/PushGradients";

// HTTP/2 settings of this end as a receiver of bulk streams (gather
// chunks): frames of up to 1 MiB (default 16 KiB: 64 frame headers, iovecs
// and slices per chunk), and a fixed 8 MiB window per stream. Without the
// BDP probe's window growth the received-but-unread data stays small, so
// it is still in cache when copied out and the heap does not keep growing
// (measured: page faults per MiB gathered at K = 4 went from 5-30 to 0).
void SetTransferArgs(grpc::ChannelArguments* args) {
  args->SetInt(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, 1 << 20);
  args->SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 8 << 20);
  args->SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
}

// Also RESOURCE_EXHAUSTED from the transport's "Received RST_STREAM with
// error code 11" (ENHANCE_YOUR_CALM): a server under its --max_inflight_bytes
// memory quota refuses new streams that way before any handler sees them,
// so the call is retried after the backoff, like a refused stream
// (UNAVAILABLE). The server's own RESOURCE_EXHAUSTED errors (a full disk, a
// model too large) say otherwise and are not retried.
// So is "Server Threadpool Exhausted": every one of the server's
// --grpc_threads was busy with a synchronous call (WriteParameters, the
// control plane) when this one came.
bool Retryable(const grpc::Status& status) {
  const grpc::StatusCode code = status.error_code();
  return code == grpc::StatusCode::UNAVAILABLE ||
         code == grpc::StatusCode::DEADLINE_EXCEEDED ||
         code == grpc::StatusCode::ABORTED ||
         (code == grpc::StatusCode::RESOURCE_EXHAUSTED &&
          (absl::StartsWith(status.error_message(),
                            "Received RST_STREAM with error code 11") ||
           status.error_message() == "Server Threadpool Exhausted"));
}

// Starts a Gather of piece `p` whose GatherChunk messages arrive as raw
// bytes (wire::ParseGatherChunk); `shared`: into that segment instead.
// `more`: ranges streamed after p's (GatherRequest.more).
std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> StartGather(
    const std::shared_ptr<grpc::Channel>& channel, grpc::ClientContext* ctx,
    const std::string& job, const ShardPiece& p, v1::DType dtype,
    const v1::SharedRef* shared, absl::Span<const Range> more = {}) {
  const grpc::internal::RpcMethod method(
      kGatherMethod, grpc::internal::RpcMethod::SERVER_STREAMING, channel);
  v1::GatherRequest req;
  req.set_job_id(job);
  req.set_offset(p.range.begin);
  req.set_length(p.range.size());
  req.set_dtype(dtype);
  for (const Range& r : more) {
    v1::GatherRange* m = req.add_more();
    m->set_offset(r.begin);
    m->set_length(r.size());
  }
  if (shared != nullptr) *req.mutable_shared() = *shared;
  return std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>>(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
          channel.get(), method, ctx, req));
}

// A server's (or this host's) "no" to shared memory, after which the
// stream is used.
bool IsSharedRefusal(const absl::Status& s) {
  return (s.code() == absl::StatusCode::kFailedPrecondition ||
          s.code() == absl::StatusCode::kUnavailable ||
          s.code() == absl::StatusCode::kUnimplemented) &&
         absl::StrContains(s.message(), "shared memory: ");
}

// Runs fn(i) for i in [0, n), at most `parallel` at once (the caller's
// thread and the process's helper threads, reused across calls; where none
// can be started the caller's thread does them all), and returns the first
// error in index order.
absl::Status RunAll(size_t n, const std::function<absl::Status(size_t)>& fn,
                    size_t parallel = SIZE_MAX) {
  std::vector<absl::Status> results(n);
  HelperThreads::Default().Run(
      n, [&](size_t i) { results[i] = fn(i); }, parallel);
  for (const absl::Status& s : results) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

double StepNorm::norm() const { return std::sqrt(sum_squares); }

namespace {

// What gRPC's words for a failed connection mean, for UNAVAILABLE: a TLS
// failure reaches the client as "Socket closed" whatever its cause.
std::string ConnectionHint(const std::string& message) {
  if (absl::StrContains(message, "Socket closed")) {
    return " (the server closed the connection: it is stopping, or the TLS "
           "handshake failed: plaintext against a TLS server, or a client "
           "certificate missing, expired or not signed by the CA the server "
           "trusts (--tls_cert/--tls_key here, its --tls_ca there); the "
           "server's log names the cause)";
  }
  if (absl::StrContains(message, "WRONG_VERSION_NUMBER")) {
    return " (TLS against a server that speaks plaintext: is it "
           "--insecure?)";
  }
  if (absl::StrContains(message, "CERTIFICATE_VERIFY_FAILED") ||
      absl::StrContains(message, "certificate verify failed")) {
    return " (the server's certificate is not signed by this client's "
           "--tls_ca, has expired, or does not name the host dialled)";
  }
  return "";
}

}  // namespace

absl::Status FromGrpcStatus(const grpc::Status& status,
                            const std::string& context) {
  if (status.ok()) return absl::OkStatus();
  const std::string hint = status.error_code() == grpc::UNAVAILABLE
                               ? ConnectionHint(status.error_message())
                               : "";
  return absl::Status(
      static_cast<absl::StatusCode>(status.error_code()),
      absl::StrCat(context, ": ", status.error_message(), hint));
}

ShardClient::ShardClient(ClientOptions options)
    : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<ShardClient>> ShardClient::Connect(
    ClientOptions options) {
  if (options.addresses.empty()) {
    return absl::InvalidArgumentError("no shard server addresses given");
  }
  for (const std::string& address : options.addresses) {
    // Not left to gRPC, which takes a port above 65535 modulo 2^16: a
    // typo would reach whatever server listens there.
    ZS_RETURN_IF_ERROR(CheckServerAddress(address));
  }
  if (options.channels_per_server < 1 || options.max_attempts < 1 ||
      options.max_piece_bytes < kMaxChunkBytes ||
      options.max_shared_piece_bytes < kMaxChunkBytes) {
    return absl::InvalidArgumentError(
        "channels_per_server and max_attempts must be >= 1, "
        "max_piece_bytes and max_shared_piece_bytes >= 1 MiB");
  }
  // $ZEROSHARD_SHARED_MEMORY can turn shared memory off for any program
  // (docs/shared_memory.md).
  if (const char* shm = std::getenv("ZEROSHARD_SHARED_MEMORY");
      shm != nullptr && shm[0] != '\0') {
    const absl::string_view v(shm);
    if (v == "0" || v == "false" || v == "off") {
      options.shared_memory = false;
    } else if (v != "1" && v != "true" && v != "on") {
      return absl::InvalidArgumentError(
          absl::StrCat("$ZEROSHARD_SHARED_MEMORY is \"", v,
                       "\"; give 1/true/on or 0/false/off"));
    }
  }
  PrepareForGrpcClients();
  auto client = std::unique_ptr<ShardClient>(new ShardClient(options));
  for (const std::string& address : options.addresses) {
    if (address.empty()) {
      return absl::InvalidArgumentError("an empty shard server address");
    }
    std::vector<std::shared_ptr<grpc::Channel>> channels;
    std::vector<std::unique_ptr<v1::ShardService::Stub>> stubs;
    for (int c = 0; c < options.channels_per_server; ++c) {
      grpc::ChannelArguments args;
      args.SetMaxReceiveMessageSize(static_cast<int>(2 * kMaxChunkBytes));
      args.SetMaxSendMessageSize(static_cast<int>(2 * kMaxChunkBytes));
      SetTransferArgs(&args);
      // A private subchannel pool gives each channel its own connection.
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      // Reconnect quickly to a restarted server (gRPC's default backoff
      // starts at 1 s and grows to 120 s).
      args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
      args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
      // gRPC's MIN_CONNECT_TIMEOUT (doc/connection-backoff.md): each attempt
      // may take max(its backoff, this) to connect and handshake. At 100 ms
      // (as it was) a loaded machine aborted every handshake ("tcp
      // handshaker shutdown") for the client's whole retry span; a refused
      // connection to a restarting server still fails at once.
      args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 5000);
      args.SetInt("zeroshard.channel_index", c);
      std::shared_ptr<grpc::ChannelCredentials> creds =
          options.credentials != nullptr ? options.credentials
                                         : grpc::InsecureChannelCredentials();
      if (options.interceptors) {
        channels.push_back(
            grpc::experimental::CreateCustomChannelWithInterceptors(
                address, creds, args, options.interceptors()));
      } else {
        channels.push_back(grpc::CreateCustomChannel(address, creds, args));
      }
      stubs.push_back(v1::ShardService::NewStub(channels.back()));
    }
    client->channels_.push_back(std::move(channels));
    client->stubs_.push_back(std::move(stubs));
  }
  const size_t k = options.addresses.size();
  client->shared_on_ = std::make_unique<std::atomic<bool>[]>(k);
  for (size_t i = 0; i < k; ++i) {
    const bool on =
        options.shared_memory && IsLoopbackAddress(options.addresses[i]);
    client->shared_on_[i].store(on);
    if (on && client->segments_ == nullptr) {
      client->segments_ = std::make_unique<SegmentPool>();
    }
  }
  return client;
}

bool ShardClient::SharedMemoryOn(uint32_t server) const {
  return server < num_servers() && shared_on_[server].load();
}

void ShardClient::SharedMemoryOff(uint32_t server,
                                  const absl::Status& why) const {
  if (shared_on_[server].exchange(false)) {
    std::fprintf(stderr,
                 "zeroshard: %s: not through shared memory (%s); the "
                 "stream carries its bytes\n",
                 options_.addresses[server].c_str(),
                 std::string(why.message()).c_str());
  }
}

v1::ShardService::Stub* ShardClient::Stub(uint32_t server,
                                          uint64_t salt) const {
  const auto& stubs = stubs_[server];
  return stubs[salt % stubs.size()].get();
}

const std::shared_ptr<grpc::Channel>& ShardClient::Channel(
    uint32_t server, uint64_t salt) const {
  const auto& channels = channels_[server];
  return channels[salt % channels.size()];
}

void ShardClient::WaitToRetry(uint32_t server,
                              std::chrono::milliseconds backoff) const {
  // A channel whose connection failed connects again in the background,
  // but gRPC (1.51) sees the new connection complete only while something
  // polls the channel: not calls that fail at once (as every call does
  // while the channel is in TRANSIENT_FAILURE), only its backup poller,
  // every 5 s, longer than all the attempts together. So a server down
  // for a moment stayed unreachable for the whole span. Waiting for the
  // channel's state polls it (and connects an idle one); a connection that
  // comes up ends the wait. Channels that are connected (the server itself
  // answered UNAVAILABLE, ABORTED, ...) wait out the backoff.
  const auto until = std::chrono::system_clock::now() + backoff;
  bool waited = false;
  for (const std::shared_ptr<grpc::Channel>& channel : channels_[server]) {
    if (channel->GetState(/*try_to_connect=*/true) == GRPC_CHANNEL_READY) {
      continue;
    }
    waited = true;
    channel->WaitForConnected(until);
  }
  if (!waited) std::this_thread::sleep_until(until);
}

absl::Status ShardClient::WithRetries(
    uint32_t server, const std::string& what,
    const std::function<grpc::Status(grpc::ClientContext*)>& attempt) const {
  auto backoff = options_.initial_backoff;
  grpc::Status status;
  for (int i = 1; i <= options_.max_attempts; ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + options_.deadline);
    status = attempt(&ctx);
    if (status.ok() || !Retryable(status) || i == options_.max_attempts) {
      break;
    }
    WaitToRetry(server, backoff);
    backoff = std::min(options_.max_backoff, backoff * 2);
  }
  return FromGrpcStatus(status, absl::StrCat(what, " on shard ", server, " (",
                                             options_.addresses[server], ")"));
}

absl::Status ShardClient::RegisterModel(const v1::ModelSpec& spec) {
  ZS_RETURN_IF_ERROR(ValidateSpec(spec));
  if (spec.num_servers() != num_servers()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ModelSpec.num_servers is ", spec.num_servers(), " but ",
                     num_servers(), " server addresses were given"));
  }
  ZS_ASSIGN_OR_RETURN(PartitionPlan plan, PlanForSpec(spec));
  const uint64_t hash = plan.Hash();
  ZS_RETURN_IF_ERROR(RunAll(num_servers(), [&](size_t k) -> absl::Status {
    v1::RegisterModelRequest req;
    *req.mutable_spec() = spec;
    v1::RegisterModelResponse resp;
    const uint32_t s = static_cast<uint32_t>(k);
    ZS_RETURN_IF_ERROR(
        WithRetries(s, "RegisterModel", [&](grpc::ClientContext* ctx) {
          return Stub(s, 0)->RegisterModel(ctx, req, &resp);
        }));
    const Range mine = plan.ServerRange(s);
    if (resp.plan_hash() != hash || resp.owned().shard_index() != s ||
        resp.owned().offset() != mine.begin ||
        resp.owned().length() != mine.size()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "shard ", s, " (", options_.addresses[s],
          ") computed a different partition plan; is it started with "
          "--shard_index=",
          s, " --num_shards=", num_servers(), "?"));
    }
    return absl::OkStatus();
  }));
  SetSpec(spec, std::move(plan));
  return absl::OkStatus();
}

absl::Status ShardClient::UseSpec(const v1::ModelSpec& spec) {
  ZS_RETURN_IF_ERROR(ValidateSpec(spec));
  if (spec.num_servers() != num_servers()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ModelSpec.num_servers is ", spec.num_servers(), " but ",
                     num_servers(), " server addresses were given"));
  }
  ZS_ASSIGN_OR_RETURN(PartitionPlan plan, PlanForSpec(spec));
  SetSpec(spec, std::move(plan));
  return absl::OkStatus();
}

void ShardClient::SetSpec(const v1::ModelSpec& spec, PartitionPlan plan) {
  // The same spec keeps the plan object: readers on other threads stay
  // safe (the C API registers once and reads the plan without a lock).
  if (plan_ != nullptr && DescribeSpecDifference(spec_, spec).empty()) return;
  plan_ = std::make_unique<PartitionPlan>(std::move(plan));
  spec_ = spec;
}

absl::Status ShardClient::AttachToRegistered() {
  v1::GetStatsResponse stats;
  ZS_RETURN_IF_ERROR(WithRetries(0, "GetStats", [&](grpc::ClientContext* ctx) {
    return Stub(0, 0)->GetStats(ctx, v1::GetStatsRequest(), &stats);
  }));
  if (!stats.has_spec()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no model is registered on shard 0 (", options_.addresses[0], ")"));
  }
  return UseSpec(stats.spec());
}

absl::StatusOr<Range> ShardClient::TensorRange(const std::string& name) const {
  if (plan_ == nullptr) {
    return absl::FailedPreconditionError("RegisterModel first");
  }
  ZS_ASSIGN_OR_RETURN(size_t index, plan_->FindTensor(name));
  return plan_->tensors()[index].range;
}

std::vector<ShardPiece> ShardClient::Pieces(const Range& r, size_t esize,
                                            bool shared) const {
  const uint64_t align = plan_->alignment();
  std::vector<ShardPiece> out;
  for (const ShardPiece& p : plan_->Split(r)) {
    // A shared piece and its header fill a power-of-two segment (what
    // SegmentPool maps), so that pieces of one size reuse one size.
    const uint64_t bytes =
        shared && SharedMemoryOn(p.server)
            ? options_.max_shared_piece_bytes - kSharedHeaderBytes
            : options_.max_piece_bytes;
    const uint64_t max_elems =
        std::max<uint64_t>(align, bytes / esize / align * align);
    for (uint64_t b = p.range.begin; b < p.range.end;) {
      // Cut at aligned offsets so each piece is a valid contribution.
      uint64_t e = std::min(p.range.end, (b / align) * align + max_elems);
      out.push_back(ShardPiece{p.server, Range{b, e}});
      b = e;
    }
  }
  return out;
}

absl::Status ShardClient::WriteParameters(const Range& r, const float* data) {
  if (plan_ == nullptr) {
    return absl::FailedPreconditionError("RegisterModel first");
  }
  // Streams (a synchronous call each on the server: at most four per
  // server at once, well inside its --grpc_threads) of max_piece_bytes.
  const std::vector<ShardPiece> pieces = Pieces(r, 4, /*shared=*/false);
  return RunAll(
      pieces.size(),
      [&](size_t i) {
        const ShardPiece& p = pieces[i];
        const char* src =
            reinterpret_cast<const char*>(data + (p.range.begin - r.begin));
        return WithRetries(
            p.server, "WriteParameters", [&](grpc::ClientContext* ctx) {
              v1::WriteParametersResponse resp;
              auto writer = Stub(p.server, i)->WriteParameters(ctx, &resp);
              v1::WriteParametersRequest msg;
              v1::WriteHeader* h = msg.mutable_header();
              h->set_job_id(spec_.job_id());
              h->set_offset(p.range.begin);
              h->set_length(p.range.size());
              h->set_dtype(v1::DTYPE_FP32);
              const uint64_t total = p.range.size() * 4;
              for (uint64_t off = 0; off < total; off += kMaxChunkBytes) {
                const uint64_t n =
                    std::min<uint64_t>(kMaxChunkBytes, total - off);
                msg.set_data(src + off, n);
                if (!writer->Write(msg)) break;
                msg.clear_header();
              }
              writer->WritesDone();
              return writer->Finish();
            });
      },
      4 * static_cast<size_t>(num_servers()));
}

absl::Status ShardClient::GatherShared(const ShardPiece& p, size_t salt,
                                       v1::DType dtype, char* out,
                                       uint64_t* step, bool* refused) const {
  const uint64_t total = p.range.size() * DTypeSize(dtype);  // bytes
  absl::StatusOr<SegmentPool::Lease> lease = segments_->Acquire(total);
  if (!lease.ok()) {
    SharedMemoryOff(p.server, lease.status());
    *refused = true;
    return lease.status();
  }
  const std::shared_ptr<grpc::Channel>& channel = Channel(p.server, salt);
  absl::Status framing = absl::OkStatus();
  absl::Status s =
      WithRetries(p.server, "Gather", [&](grpc::ClientContext* ctx) {
        framing = absl::OkStatus();
        gather_requests_.fetch_add(1);
        auto reader =
            StartGather(channel, ctx, spec_.job_id(), p, dtype, &lease->ref());
        grpc::ByteBuffer message;
        wire::GatherChunkView chunk;
        int chunks = 0;
        while (reader->Read(&message)) {
          const wire::WireMessage m(message);
          framing = wire::ParseGatherChunk(m, &chunk);
          if (framing.ok() && chunk.data.size != 0) {
            // A server from before shared memory ignores the field and
            // streams the bytes: the stream it is.
            framing = absl::FailedPreconditionError(
                "shared memory: the server sends the bytes on the stream "
                "(a version without shared memory)");
          } else if (framing.ok() &&
                     (chunks > 0 || chunk.shared_bytes != total ||
                      chunk.offset != p.range.begin)) {
            framing = absl::DataLossError(
                absl::StrCat("Gather on shard ", p.server,
                             ": the answer to a shared-"
                             "memory gather does not cover its ",
                             total, " bytes"));
          }
          if (!framing.ok()) {
            ctx->TryCancel();
            break;
          }
          *step = chunk.step;
          ++chunks;
        }
        grpc::Status st = reader->Finish();
        if (st.ok() && framing.ok() && chunks != 1) {
          framing =
              absl::DataLossError(absl::StrCat("Gather on shard ", p.server,
                                               ": no answer to a shared-"
                                               "memory gather"));
        }
        return framing.ok() ? st : grpc::Status::OK;
      });
  if (s.ok() && IsSharedRefusal(framing)) s = framing;
  if (IsSharedRefusal(s)) {
    SharedMemoryOff(p.server, s);
    *refused = true;
    return s;
  }
  if (!s.ok() || !framing.ok()) {
    lease->Discard();  // the server may still be writing there
    return s.ok() ? framing : s;
  }
  std::memcpy(out, lease->data(), total);
  return absl::OkStatus();
}

absl::Status ShardClient::GatherPiece(const ShardPiece& p, size_t salt,
                                      v1::DType dtype, char* out,
                                      uint64_t* step) const {
  if (SharedMemoryOn(p.server)) {
    bool refused = false;
    absl::Status s = GatherShared(p, salt, dtype, out, step, &refused);
    if (!refused) return s;
  }
  return GatherStream(p.server, {p.range}, {out}, salt, dtype, step);
}

absl::Status ShardClient::GatherStream(uint32_t server,
                                       const std::vector<Range>& ranges,
                                       const std::vector<char*>& outs,
                                       size_t salt, v1::DType dtype,
                                       uint64_t* step) const {
  const size_t esize = DTypeSize(dtype);
  uint64_t total = 0;  // elements
  for (const Range& r : ranges) total += r.size();
  const std::shared_ptr<grpc::Channel>& channel = Channel(server, salt);
  const ShardPiece first{server, ranges.front()};
  const absl::Span<const Range> more = absl::MakeConstSpan(ranges).subspan(1);
  absl::Status framing = absl::OkStatus();
  absl::Status s = WithRetries(server, "Gather", [&](grpc::ClientContext* ctx) {
    framing = absl::OkStatus();
    // The payload is copied from gRPC's slices straight into `outs`.
    gather_requests_.fetch_add(1);
    auto reader =
        StartGather(channel, ctx, spec_.job_id(), first, dtype, nullptr, more);
    grpc::ByteBuffer message;
    wire::GatherChunkView chunk;
    size_t k = 0;           // the range being received
    uint64_t received = 0;  // bytes of range k
    uint64_t all = 0;       // elements of every range
    bool first_chunk = true;
    while (reader->Read(&message)) {
      const wire::WireMessage m(message);
      framing = wire::ParseGatherChunk(m, &chunk);
      // Chunks come range by range (empty ranges send none).
      while (k < ranges.size() && received == ranges[k].size() * esize) {
        ++k;
        received = 0;
      }
      const uint64_t n = chunk.data.size;
      if (framing.ok() && (k == ranges.size() || n % esize != 0 ||
                           n > ranges[k].size() * esize - received ||
                           chunk.offset != ranges[k].begin + received / esize ||
                           (!first_chunk && chunk.step != *step))) {
        framing = absl::DataLossError(
            absl::StrCat("malformed chunk at offset ", chunk.offset));
      }
      if (!framing.ok()) {
        framing = absl::DataLossError(
            absl::StrCat("Gather on shard ", server, ": ", framing.message()));
        ctx->TryCancel();
        break;
      }
      *step = chunk.step;
      first_chunk = false;
      chunk.data.CopyTo(outs[k] + received);
      received += n;
      all += n / esize;
    }
    grpc::Status st = reader->Finish();
    if (st.ok() && framing.ok() && all != total) {
      framing = absl::DataLossError(absl::StrCat(
          "Gather on shard ", server, ": stream ended after ", all, " of ",
          total, " elements",
          ranges.size() > 1 ? " (a server without multi-range gathers?)" : ""));
    }
    return framing.ok() ? st : grpc::Status::OK;
  });
  ZS_RETURN_IF_ERROR(s);
  return framing;
}

absl::Status ShardClient::Gather(const Range& r, v1::DType dtype, void* out,
                                 uint64_t* step) {
  void* const outs[] = {out};
  return GatherRanges(absl::MakeConstSpan(&r, 1), dtype, outs, step);
}

absl::Status ShardClient::GatherRanges(absl::Span<const Range> ranges,
                                       v1::DType dtype,
                                       absl::Span<void* const> outs,
                                       uint64_t* step) {
  if (plan_ == nullptr) {
    return absl::FailedPreconditionError("RegisterModel first");
  }
  if (ranges.size() != outs.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("GatherRanges: ", ranges.size(), " ranges but ",
                     outs.size(), " output buffers"));
  }
  const size_t esize = DTypeSize(dtype);
  if (esize == 0) return absl::InvalidArgumentError("unknown dtype");
  std::vector<ShardPiece> pieces;
  std::vector<char*> dsts;  // where each piece goes
  for (size_t k = 0; k < ranges.size(); ++k) {
    for (ShardPiece& p : Pieces(ranges[k], esize)) {
      dsts.push_back(static_cast<char*>(outs[k]) +
                     (p.range.begin - ranges[k].begin) * esize);
      pieces.push_back(std::move(p));
    }
  }
  // Small pieces of one server travel together: one stream each for up to
  // max_piece_bytes of them (GatherRequest.more), so that many scattered
  // ranges (stage 3's part of every unit) cost a request per server, not
  // one per range. A piece on its own keeps the shared-memory path.
  struct Batch {
    uint32_t server;
    std::vector<Range> ranges;
    std::vector<char*> outs;
    uint64_t bytes = 0;
  };
  std::vector<Batch> batches;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const ShardPiece& p = pieces[i];
    if (p.range.empty()) continue;
    const uint64_t bytes = p.range.size() * esize;
    Batch* b = nullptr;
    for (Batch& c : batches) {
      if (c.server == p.server && c.bytes + bytes <= options_.max_piece_bytes &&
          !SharedMemoryOn(p.server)) {
        b = &c;
      }
    }
    if (b == nullptr) {
      batches.push_back(Batch{p.server, {}, {}, 0});
      b = &batches.back();
    }
    b->ranges.push_back(p.range);
    b->outs.push_back(dsts[i]);
    b->bytes += bytes;
  }
  std::vector<uint64_t> steps(batches.size(), 0);
  // Pieces from different servers can straddle a commit (one server has
  // committed, another not yet): gather again, a bounded number of times.
  auto backoff = options_.initial_backoff;
  for (int attempt = 1;; ++attempt) {
    ZS_RETURN_IF_ERROR(RunAll(batches.size(), [&](size_t i) {
      const Batch& b = batches[i];
      if (b.ranges.size() == 1) {
        return GatherPiece(ShardPiece{b.server, b.ranges[0]}, i, dtype,
                           b.outs[0], &steps[i]);
      }
      return GatherStream(b.server, b.ranges, b.outs, i, dtype, &steps[i]);
    }));
    const bool consistent =
        std::all_of(steps.begin(), steps.end(),
                    [&](uint64_t s) { return s == steps.front(); });
    if (consistent) break;
    if (attempt == options_.max_attempts) {
      return absl::AbortedError(
          "servers kept answering from different steps (commits in "
          "progress); gather again");
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(options_.max_backoff, backoff * 2);
  }
  if (step != nullptr && !steps.empty()) *step = steps.front();
  return absl::OkStatus();
}

absl::Status ShardClient::PushPiece(const ShardPiece& p, size_t salt,
                                    v1::DType dtype, const char* data,
                                    const PushId& id) const {
  const size_t esize = DTypeSize(dtype);
  const std::shared_ptr<grpc::Channel>& channel = Channel(p.server, salt);
  const grpc::internal::RpcMethod method(
      kPushMethod, grpc::internal::RpcMethod::CLIENT_STREAMING, channel);
  v1::PushHeader header;
  header.set_job_id(spec_.job_id());
  header.set_epoch(id.epoch);
  header.set_step(id.step);
  header.set_slot(id.slot);
  header.set_offset(p.range.begin);
  header.set_length(p.range.size());
  header.set_dtype(dtype);
  header.set_idempotency_key(absl::StrCat(id.key_prefix, "/", p.range.begin));
  if (SharedMemoryOn(p.server)) {
    bool refused = false;
    absl::Status s = PushShared(p, salt, dtype, data, header, &refused);
    if (!refused) return s;
  }
  return WithRetries(p.server, "PushGradients", [&](grpc::ClientContext* ctx) {
    v1::PushGradientsResponse resp;
    std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
        grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(
            channel.get(), method, ctx, &resp));
    const uint64_t total = p.range.size() * esize;
    const uint64_t chunk = kMaxChunkBytes / esize * esize;
    for (uint64_t off = 0; off < total; off += chunk) {
      // PushGradientsRequest{header on the first message, data}: the
      // encoded fields, then the caller's bytes as a static slice (no
      // copy; `data` outlives the call, and Finish() below returns only
      // after gRPC has released every message).
      const uint64_t n = std::min<uint64_t>(chunk, total - off);
      const grpc::Slice slices[2] = {
          grpc::Slice(
              wire::EncodePushRequestPrefix(off == 0 ? &header : nullptr, n)),
          grpc::Slice(data + off, n, grpc::Slice::STATIC_SLICE)};
      grpc::ByteBuffer message(slices, 2);
      if (!writer->Write(message)) break;  // the server answered early
    }
    writer->WritesDone();
    return writer->Finish();
  });
}

absl::Status ShardClient::PushShared(const ShardPiece& p, size_t salt,
                                     v1::DType dtype, const char* data,
                                     const v1::PushHeader& header,
                                     bool* refused) const {
  const uint64_t total = p.range.size() * DTypeSize(dtype);  // bytes
  absl::StatusOr<SegmentPool::Lease> lease = segments_->Acquire(total);
  if (!lease.ok()) {
    SharedMemoryOff(p.server, lease.status());
    *refused = true;
    return lease.status();
  }
  std::memcpy(lease->data(), data, total);
  v1::PushGradientsRequest first;
  *first.mutable_header() = header;
  *first.mutable_shared() = lease->ref();
  const std::string bytes = first.SerializeAsString();
  const std::shared_ptr<grpc::Channel>& channel = Channel(p.server, salt);
  const grpc::internal::RpcMethod method(
      kPushMethod, grpc::internal::RpcMethod::CLIENT_STREAMING, channel);
  absl::Status s =
      WithRetries(p.server, "PushGradients", [&](grpc::ClientContext* ctx) {
        v1::PushGradientsResponse resp;
        std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
            grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(
                channel.get(), method, ctx, &resp));
        grpc::Slice slice(bytes.data(), bytes.size(),
                          grpc::Slice::STATIC_SLICE);
        grpc::ByteBuffer message(&slice, 1);
        writer->Write(message);
        writer->WritesDone();
        return writer->Finish();
      });
  if (IsSharedRefusal(s)) {
    SharedMemoryOff(p.server, s);
    *refused = true;
    return s;
  }
  if (!s.ok()) lease->Discard();  // the server may still be reading there
  return s;
}

absl::Status ShardClient::Push(const Range& r, v1::DType dtype,
                               const void* data, const PushId& id) {
  if (plan_ == nullptr) {
    return absl::FailedPreconditionError("RegisterModel first");
  }
  const size_t esize = DTypeSize(dtype);
  if (esize == 0) return absl::InvalidArgumentError("unknown dtype");
  if (id.key_prefix.empty()) {
    return absl::InvalidArgumentError("PushId.key_prefix is empty");
  }
  const std::vector<ShardPiece> pieces = Pieces(r, esize);
  return RunAll(pieces.size(), [&](size_t i) {
    const char* src = static_cast<const char*>(data) +
                      (pieces[i].range.begin - r.begin) * esize;
    return PushPiece(pieces[i], i, dtype, src, id);
  });
}

std::future<absl::Status> ShardClient::PushAsync(const Range& r,
                                                 v1::DType dtype,
                                                 const void* data, PushId id) {
  return HelperThreads::Default().Async(
      [this, r, dtype, data, id] { return Push(r, dtype, data, id); });
}

absl::StatusOr<StepNorm> ShardClient::Prepare(uint64_t epoch, uint64_t step) {
  if (plan_ == nullptr) {
    return absl::FailedPreconditionError("RegisterModel first");
  }
  std::vector<v1::PrepareStepResponse> answers(num_servers());
  const auto give_up = std::chrono::steady_clock::now() + options_.deadline;
  ZS_RETURN_IF_ERROR(RunAll(num_servers(), [&](size_t k) -> absl::Status {
    const uint32_t s = static_cast<uint32_t>(k);
    v1::PrepareStepRequest req;
    req.set_job_id(spec_.job_id());
    req.set_epoch(epoch);
    req.set_step(step);
    auto wait = std::chrono::microseconds(200);
    while (true) {
      ZS_RETURN_IF_ERROR(
          WithRetries(s, "PrepareStep", [&](grpc::ClientContext* ctx) {
            return Stub(s, 0)->PrepareStep(ctx, req, &answers[k]);
          }));
      if (answers[k].complete()) return absl::OkStatus();
      if (std::chrono::steady_clock::now() > give_up) {
        return absl::DeadlineExceededError(
            absl::StrCat("PrepareStep on shard ", s, ": step ", step, " has ",
                         answers[k].received_elements(), " of ",
                         answers[k].expected_elements(),
                         " gradient elements after the deadline"));
      }
      std::this_thread::sleep_for(wait);
      wait = std::min<std::chrono::microseconds>(wait * 2,
                                                 std::chrono::milliseconds(20));
    }
  }));
  StepNorm norm;
  for (const auto& a : answers) {  // shard order: deterministic
    norm.sum_squares += a.sum_squares();
    norm.overflow |= a.overflow();
  }
  return norm;
}

absl::Status ShardClient::Commit(uint64_t epoch, uint64_t step, float clip_coef,
                                 double lr, bool skip,
                                 const v1::TrainerState* state, bool prepare) {
  if (plan_ == nullptr) {
    return absl::FailedPreconditionError("RegisterModel first");
  }
  return RunAll(num_servers(), [&](size_t k) {
    const uint32_t s = static_cast<uint32_t>(k);
    v1::CommitStepRequest req;
    req.set_job_id(spec_.job_id());
    req.set_epoch(epoch);
    req.set_step(step);
    req.set_clip_coef(clip_coef);
    req.set_lr(lr);
    req.set_skip(skip);
    req.set_prepare(prepare);
    if (state != nullptr) *req.mutable_trainer_state() = *state;
    v1::CommitStepResponse resp;
    return WithRetries(s, "CommitStep", [&](grpc::ClientContext* ctx) {
      return Stub(s, 0)->CommitStep(ctx, req, &resp);
    });
  });
}

absl::StatusOr<std::vector<v1::CheckpointShard>> ShardClient::Checkpoint(
    uint64_t step, const v1::TrainerState* state, const std::string& tag,
    std::vector<std::string>* paths) {
  if (plan_ == nullptr) {
    return absl::FailedPreconditionError("RegisterModel or UseSpec first");
  }
  v1::CheckpointRequest req;
  req.set_job_id(spec_.job_id());
  req.set_step(step);
  req.set_tag(tag);
  if (state != nullptr) *req.mutable_trainer_state() = *state;
  std::vector<v1::CheckpointResponse> written(num_servers());
  ZS_RETURN_IF_ERROR(RunAll(num_servers(), [&](size_t k) {
    const uint32_t s = static_cast<uint32_t>(k);
    return WithRetries(s, "Checkpoint", [&](grpc::ClientContext* ctx) {
      return Stub(s, 0)->Checkpoint(ctx, req, &written[k]);
    });
  }));
  std::vector<v1::CheckpointShard> shards;
  for (const v1::CheckpointResponse& r : written) {
    shards.push_back(r.shard());
    *req.add_shards() = r.shard();
    if (paths != nullptr) paths->push_back(r.path());
  }
  req.set_finalize(true);
  ZS_RETURN_IF_ERROR(RunAll(num_servers(), [&](size_t k) {
    const uint32_t s = static_cast<uint32_t>(k);
    v1::CheckpointResponse resp;
    return WithRetries(s, "Checkpoint(finalize)",
                       [&](grpc::ClientContext* ctx) {
                         return Stub(s, 0)->Checkpoint(ctx, req, &resp);
                       });
  }));
  return shards;
}

absl::StatusOr<v1::TrainerState> ShardClient::Restore(uint64_t step,
                                                      uint64_t epoch,
                                                      bool resume) {
  if (spec_.job_id().empty()) {
    return absl::FailedPreconditionError("RegisterModel or UseSpec first");
  }
  std::vector<v1::RestoreResponse> out(num_servers());
  ZS_RETURN_IF_ERROR(RunAll(num_servers(), [&](size_t k) {
    const uint32_t s = static_cast<uint32_t>(k);
    v1::RestoreRequest req;
    req.set_job_id(spec_.job_id());
    req.set_step(step);
    req.set_epoch(epoch);
    req.set_resume(resume);
    return WithRetries(s, "Restore", [&](grpc::ClientContext* ctx) {
      return Stub(s, 0)->Restore(ctx, req, &out[k]);
    });
  }));
  for (const v1::RestoreResponse& r : out) {
    if (r.step() != out[0].step()) {
      return absl::DataLossError(
          absl::StrCat("servers restored different steps (", out[0].step(),
                       " and ", r.step(), "): restore one step explicitly"));
    }
  }
  return out[0].trainer_state();
}

absl::StatusOr<std::vector<v1::GetStatsResponse>> ShardClient::Stats(
    bool ledger) {
  std::vector<v1::GetStatsResponse> out(num_servers());
  ZS_RETURN_IF_ERROR(RunAll(num_servers(), [&](size_t k) {
    const uint32_t s = static_cast<uint32_t>(k);
    v1::GetStatsRequest req;
    req.set_ledger(ledger);
    return WithRetries(s, "GetStats", [&](grpc::ClientContext* ctx) {
      return Stub(s, 0)->GetStats(ctx, req, &out[k]);
    });
  }));
  return out;
}

}  // namespace zeroshard
