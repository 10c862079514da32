#include "server/data_plane.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/model_spec.h"
#include "proto/wire.h"
#include "server/shard_service.h"

namespace zeroshard {

struct IdleStreams::Watch {
  // Guards ctx. Recursive: gRPC may run the reactor's OnDone (Unwatch)
  // inline in TryCancel, on the checking thread that holds it.
  std::recursive_mutex mu;
  grpc::CallbackServerContext* ctx = nullptr;  // null once unwatched
  std::atomic<int64_t> last_progress_ns{0};
  std::atomic<bool> timed_out{false};
};

namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

IdleStreams::IdleStreams(absl::Duration timeout) : timeout_(timeout) {
  if (timeout_ > absl::ZeroDuration()) {
    thread_ = std::make_unique<std::thread>([this] { Run(); });
  }
}

IdleStreams::~IdleStreams() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  if (thread_ != nullptr) thread_->join();
}

std::shared_ptr<IdleStreams::Watch> IdleStreams::Start(
    grpc::CallbackServerContext* ctx) {
  if (thread_ == nullptr || ctx == nullptr) return nullptr;
  auto w = std::make_shared<Watch>();
  w->ctx = ctx;
  w->last_progress_ns = NowNs();
  absl::MutexLock l(&mu_);
  watched_.push_back(w);
  return w;
}

void IdleStreams::Touch(Watch* w) {
  if (w != nullptr) w->last_progress_ns = NowNs();
}

bool IdleStreams::TimedOut(const Watch* w) {
  return w != nullptr && w->timed_out.load();
}

void IdleStreams::Unwatch(const std::shared_ptr<Watch>& w) {
  if (w == nullptr) return;
  {
    std::lock_guard<std::recursive_mutex> g(w->mu);
    w->ctx = nullptr;
  }
  absl::MutexLock l(&mu_);
  watched_.erase(std::remove(watched_.begin(), watched_.end(), w),
                 watched_.end());
}

void IdleStreams::Run() {
  const absl::Duration period = std::min(timeout_ / 4, absl::Seconds(1));
  const int64_t limit_ns = absl::ToInt64Nanoseconds(timeout_);
  mu_.Lock();
  while (!mu_.AwaitWithTimeout(absl::Condition(&stop_), period)) {
    const int64_t now = NowNs();
    std::vector<std::shared_ptr<Watch>> idle;
    for (const std::shared_ptr<Watch>& w : watched_) {
      if (now - w->last_progress_ns.load() > limit_ns && !w->timed_out) {
        idle.push_back(w);
      }
    }
    mu_.Unlock();  // Unwatch may run inline in TryCancel
    for (const std::shared_ptr<Watch>& w : idle) {
      std::lock_guard<std::recursive_mutex> g(w->mu);
      if (w->ctx == nullptr) continue;
      w->timed_out = true;
      w->ctx->TryCancel();
    }
    mu_.Lock();
  }
  mu_.Unlock();
}

namespace {

// A gather chunk's buffer: [room for the prefix][payload]. The payload
// starts at a cache-line offset; the prefix is encoded right before it.
constexpr size_t kPayloadAt = 64;
static_assert(kPayloadAt >= wire::kMaxGatherPrefixBytes);

void FreeChunk(void* p) { delete[] static_cast<char*>(p); }

class GatherReactor : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  GatherReactor(ShardStore* store, const grpc::ByteBuffer* request,
                grpc::CallbackServerContext* ctx, IdleStreams* idle,
                SharedSegments* shared)
      : store_(store),
        idle_(idle),
        watch_(idle != nullptr ? idle->Start(ctx) : nullptr) {
    grpc::Slice flat;
    if (!request->DumpToSingleSlice(&flat).ok() ||
        !req_.ParseFromArray(flat.begin(), static_cast<int>(flat.size()))) {
      store_->CountRejected();
      Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "malformed GatherRequest (bad protobuf encoding)"));
      return;
    }
    const absl::Status s = store_->CheckGather(req_);
    if (!s.ok()) {
      Finish(ToGrpcStatus(s));
      return;
    }
    esize_ = DTypeSize(req_.dtype());
    ranges_.push_back({req_.offset(), req_.length()});
    for (const v1::GatherRange& m : req_.more()) {
      ranges_.push_back({m.offset(), m.length()});
    }
    if (req_.has_shared()) {
      FillShared(shared);
      return;
    }
    Next();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"));
      return;
    }
    IdleStreams::Touch(watch_.get());
    Next();
  }
  void OnDone() override {
    if (idle_ != nullptr) idle_->Unwatch(watch_);
    delete this;
  }

 private:
  // Writes the next chunk (of the range being sent, then of the next
  // non-empty one), or finishes.
  void Next() {
    while (range_ < ranges_.size() && done_ == ranges_[range_].second) {
      ++range_;
      done_ = 0;
    }
    if (range_ == ranges_.size()) {
      Finish(grpc::Status::OK);
      return;
    }
    const auto [first, length] = ranges_[range_];
    const uint64_t n =
        std::min<uint64_t>(kMaxChunkBytes / esize_, length - done_);
    const uint64_t bytes = n * esize_;
    const uint64_t offset = first + done_;
    // Freed by gRPC (FreeChunk) when it drops the slice, which may be
    // after this reactor is gone.
    char* buf = new char[kPayloadAt + bytes];
    uint64_t step = 0;
    const absl::Status s =
        store_->GatherInto(offset, n, req_.dtype(), buf + kPayloadAt, &step);
    if (!sent_any_) first_step_ = step;
    sent_any_ = true;
    if (!s.ok() || step != first_step_) {
      delete[] buf;
      Finish(s.ok() ? grpc::Status(grpc::StatusCode::ABORTED,
                                   "a step was committed during the gather; "
                                   "retry")
                    : ToGrpcStatus(s));
      return;
    }
    char prefix[wire::kMaxGatherPrefixBytes];
    const size_t k = wire::EncodeGatherChunkPrefix(step, offset, bytes, prefix);
    char* begin = buf + kPayloadAt - k;
    std::memcpy(begin, prefix, k);
    grpc::Slice slice(begin, k + bytes, &FreeChunk, buf);
    message_ = grpc::ByteBuffer(&slice, 1);
    done_ += n;
    StartWrite(&message_);
  }

  // The whole range into the client's shared segment, then one chunk
  // saying so (or the refusal).
  void FillShared(SharedSegments* shared) {
    if (shared == nullptr) {
      Finish(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          "shared memory: off on this server "
                          "(--shared_memory=false)"));
      return;
    }
    absl::StatusOr<SharedSegments::View> view =
        shared->Resolve(req_.shared(), req_.length() * esize_);
    if (!view.ok()) {
      Finish(ToGrpcStatus(view.status()));
      return;
    }
    const uint64_t per_chunk = kMaxChunkBytes / esize_;
    for (uint64_t done = 0; done < req_.length(); done += per_chunk) {
      const uint64_t n = std::min(per_chunk, req_.length() - done);
      uint64_t step = 0;
      const absl::Status s =
          store_->GatherInto(req_.offset() + done, n, req_.dtype(),
                             view->data + done * esize_, &step);
      if (done == 0) first_step_ = step;
      if (!s.ok() || step != first_step_) {
        Finish(s.ok() ? grpc::Status(grpc::StatusCode::ABORTED,
                                     "a step was committed during the "
                                     "gather; retry")
                      : ToGrpcStatus(s));
        return;
      }
    }
    v1::GatherChunk chunk;
    chunk.set_step(first_step_);
    chunk.set_offset(req_.offset());
    chunk.set_shared_bytes(req_.length() * esize_);
    grpc::Slice slice(chunk.SerializeAsString());
    message_ = grpc::ByteBuffer(&slice, 1);
    done_ = req_.length();  // OnWriteDone then finishes (one range)
    StartWrite(&message_);
  }

  ShardStore* const store_;
  IdleStreams* const idle_;
  const std::shared_ptr<IdleStreams::Watch> watch_;
  v1::GatherRequest req_;
  // (offset, length) and `more`'s ranges, in stream order.
  std::vector<std::pair<uint64_t, uint64_t>> ranges_;
  size_t range_ = 0;   // the range being sent
  uint64_t done_ = 0;  // elements of it sent
  size_t esize_ = 0;
  bool sent_any_ = false;
  uint64_t first_step_ = 0;
  grpc::ByteBuffer message_;
};

class PushReactor : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  PushReactor(ShardStore* store, grpc::ByteBuffer* response,
              grpc::CallbackServerContext* ctx, IdleStreams* idle,
              SharedSegments* shared)
      : store_(store),
        response_(response),
        idle_(idle),
        shared_(shared),
        watch_(idle != nullptr ? idle->Start(ctx) : nullptr) {
    StartRead(&message_);
  }

  void OnReadDone(bool ok) override {
    if (!ok && IdleStreams::TimedOut(watch_.get())) {
      Done(Invalid(
          absl::StrCat(
              "push stream idle for more than ",
              absl::FormatDuration(idle_->timeout()),
              " (--stream_idle_timeout_seconds); its range is released"),
          grpc::StatusCode::DEADLINE_EXCEEDED));
      return;
    }
    if (!ok) {  // the client is done sending (or went away)
      Done(End());
      return;
    }
    IdleStreams::Touch(watch_.get());
    bool answered = false;
    const grpc::Status s = Consume(&answered);
    if (!s.ok() || answered) {
      Done(s);
      return;
    }
    ++messages_;
    StartRead(&message_);
  }
  void OnDone() override {
    if (idle_ != nullptr) idle_->Unwatch(watch_);
    delete this;
  }

 private:
  // Ends the call. The session goes first: an unfinished one releases its
  // range before the client sees the status (as when the synchronous
  // handler returned), so a retry cannot find the range still reserved.
  void Done(const grpc::Status& status) {
    session_.reset();
    Finish(status);
  }

  grpc::Status Invalid(
      const std::string& message,
      grpc::StatusCode code = grpc::StatusCode::INVALID_ARGUMENT) {
    store_->CountRejected();
    return grpc::Status(code, message);
  }

  // One PushGradientsRequest, as the generated handler treated it: the
  // first message carries the header, later ones must not; non-empty data
  // goes to the session.
  grpc::Status Consume(bool* answered) {
    const wire::WireMessage m(message_);
    wire::PushRequestView view;
    const absl::Status parsed = wire::ParsePushRequest(m, &view);
    if (!parsed.ok()) return Invalid(std::string(parsed.message()));
    if (messages_ == 0) {
      v1::PushHeader header;
      if (!view.header.present) {
        return Invalid("the first PushGradients message must carry a header");
      }
      if (!header.ParseFromString(view.header.ToString())) {
        return Invalid("malformed PushHeader (bad protobuf encoding)");
      }
      SharedSegments::View in_shared;
      if (view.shared.present) {  // before anything changes
        absl::StatusOr<SharedSegments::View> v = ResolveShared(header, view);
        if (!v.ok()) {
          if (v.status().code() == absl::StatusCode::kInvalidArgument) {
            return Invalid(std::string(v.status().message()));
          }
          return ToGrpcStatus(v.status());
        }
        in_shared = *std::move(v);
      }
      auto session = store_->BeginPush(header);
      if (!session.ok()) return ToGrpcStatus(session.status());
      session_ = std::move(*session);
      esize_ = DTypeSize(header.dtype());
      if (session_->duplicate()) {
        v1::PushGradientsResponse resp;
        resp.set_duplicate(true);
        resp.set_elements_received(session_->length());
        SetResponse(resp);
        *answered = true;
        return grpc::Status::OK;
      }
      if (in_shared.data != nullptr) {
        shared_push_ = true;
        return ToGrpcStatus(FeedShared(in_shared.data));
      }
    } else if (view.header.present || view.shared.present) {
      return Invalid(
          "only the first message may carry a header or a "
          "shared segment");
    }
    if (view.data.size == 0) return grpc::Status::OK;
    if (shared_push_) {
      return Invalid("a push from shared memory carries no data messages");
    }
    return ToGrpcStatus(Feed(view.data));
  }

  // Where the contribution `header` announces lies in the shared segment
  // the first message names.
  absl::StatusOr<SharedSegments::View> ResolveShared(
      const v1::PushHeader& header, const wire::PushRequestView& view) {
    if (shared_ == nullptr) {
      return absl::FailedPreconditionError(
          "shared memory: off on this server (--shared_memory=false)");
    }
    v1::SharedRef ref;
    if (!ref.ParseFromString(view.shared.ToString())) {
      return absl::InvalidArgumentError(
          "malformed SharedRef (bad protobuf encoding)");
    }
    if (view.data.size != 0) {
      return absl::InvalidArgumentError(
          "a push from shared memory carries no data");
    }
    const uint64_t esize = DTypeSize(header.dtype());
    if (esize == 0 || header.length() > (uint64_t{1} << 56) / esize) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shared memory: a push of ", header.length(), " elements of dtype ",
          header.dtype(), " is not a size"));
    }
    return shared_->Resolve(ref, header.length() * esize);
  }

  // The whole contribution from shared memory, chunk by chunk.
  absl::Status FeedShared(const char* data) {
    const uint64_t total = session_->length() * esize_;
    const uint64_t chunk = kMaxChunkBytes / esize_ * esize_;
    for (uint64_t off = 0; off < total; off += chunk) {
      absl::Status s =
          session_->AddChunk(data + off, std::min(chunk, total - off));
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // Hands one chunk's payload to the session.
  absl::Status Feed(const wire::Bytes& data) {
    if (data.pieces.size() == 1 && Aligned(data.pieces[0].data())) {
      return session_->AddChunk(data.pieces[0].data(), data.size);
    }
    if (data.size % esize_ != 0 || data.size > kMaxChunkBytes) {
      // The session rejects it; let it say why, as for any chunk.
      staging_.resize(data.size);
      data.CopyTo(staging_.data());
      return session_->AddChunk(staging_.data(), data.size);
    }
    // Piece by piece: aligned whole elements directly, the rest (an
    // element split across pieces, a misaligned piece) staged.
    staging_.resize(std::max<size_t>(staging_.size(), kStagingBytes));
    size_t staged = 0;
    for (absl::string_view p : data.pieces) {
      if (staged == 0 && Aligned(p.data())) {
        const size_t whole = p.size() / esize_ * esize_;
        if (whole > 0) {
          absl::Status s = session_->AddChunk(p.data(), whole);
          if (!s.ok()) return s;
        }
        p.remove_prefix(whole);
      }
      while (!p.empty()) {
        const size_t take = std::min(p.size(), staging_.size() - staged);
        std::memcpy(staging_.data() + staged, p.data(), take);
        staged += take;
        p.remove_prefix(take);
        const size_t whole = staged / esize_ * esize_;
        if (whole > 0) {
          absl::Status s = session_->AddChunk(staging_.data(), whole);
          if (!s.ok()) return s;
        }
        std::memmove(staging_.data(), staging_.data() + whole, staged - whole);
        staged -= whole;
      }
    }
    return absl::OkStatus();  // staged == 0: the size is whole elements
  }

  bool Aligned(const void* p) const {
    return reinterpret_cast<uintptr_t>(p) % esize_ == 0;
  }

  // The client has sent everything.
  grpc::Status End() {
    if (session_ == nullptr) {
      return Invalid("the first PushGradients message must carry a header");
    }
    const absl::Status s = session_->Finish();
    if (!s.ok()) return ToGrpcStatus(s);
    v1::PushGradientsResponse resp;
    resp.set_elements_received(session_->length());
    SetResponse(resp);
    return grpc::Status::OK;
  }

  void SetResponse(const v1::PushGradientsResponse& resp) {
    grpc::Slice slice(resp.SerializeAsString());
    *response_ = grpc::ByteBuffer(&slice, 1);
  }

  static constexpr size_t kStagingBytes = 64 << 10;

  ShardStore* const store_;
  grpc::ByteBuffer* const response_;
  IdleStreams* const idle_;
  SharedSegments* const shared_;
  bool shared_push_ = false;  // the payload came from shared memory
  const std::shared_ptr<IdleStreams::Watch> watch_;
  grpc::ByteBuffer message_;
  std::unique_ptr<PushSession> session_;
  size_t esize_ = 1;
  uint64_t messages_ = 0;
  std::vector<char> staging_;  // element-aligned (new[] alignment)
};

}  // namespace

grpc::ServerWriteReactor<grpc::ByteBuffer>* NewGatherReactor(
    ShardStore* store, const grpc::ByteBuffer* request,
    grpc::CallbackServerContext* ctx, IdleStreams* idle,
    SharedSegments* shared) {
  return new GatherReactor(store, request, ctx, idle, shared);
}

grpc::ServerReadReactor<grpc::ByteBuffer>* NewPushReactor(
    ShardStore* store, grpc::ByteBuffer* response,
    grpc::CallbackServerContext* ctx, IdleStreams* idle,
    SharedSegments* shared) {
  return new PushReactor(store, response, ctx, idle, shared);
}

}  // namespace zeroshard
