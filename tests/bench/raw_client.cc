#include "tests/bench/raw_client.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/model_spec.h"
#include "proto/zeroshard.grpc.pb.h"
#include "tests/bench/raw_wire.h"

namespace zeroshard {
namespace bench {
namespace {

constexpr char kGatherMethod[] = "/zeroshard.v1.ShardService/Gather";
constexpr char kPushMethod[] = "/zeroshard.v1.ShardService/PushGradients";

absl::Status RunAll(size_t n, const std::function<absl::Status(size_t)>& fn) {
  std::vector<absl::Status> results(n);
  std::vector<std::thread> threads;
  for (size_t i = 1; i < n; ++i) {
    threads.emplace_back([&, i] { results[i] = fn(i); });
  }
  if (n > 0) results[0] = fn(0);
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : results) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status FromGrpc(const grpc::Status& s, const std::string& what) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(what, ": ", s.error_message()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<RawClient>> RawClient::Connect(
    RawClientOptions options, const PartitionPlan& plan, std::string job_id) {
  if (options.addresses.size() != plan.num_servers() ||
      options.channels_per_server < 1) {
    return absl::InvalidArgumentError("bad RawClient options");
  }
  auto client = std::unique_ptr<RawClient>(
      new RawClient(std::move(options), plan, std::move(job_id)));
  for (const std::string& address : client->options_.addresses) {
    std::vector<std::shared_ptr<grpc::Channel>> channels;
    for (int c = 0; c < client->options_.channels_per_server; ++c) {
      grpc::ChannelArguments args;
      args.SetMaxReceiveMessageSize(static_cast<int>(2 * kMaxChunkBytes));
      args.SetMaxSendMessageSize(static_cast<int>(2 * kMaxChunkBytes));
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      args.SetInt("zeroshard.channel_index", c);
      for (const auto& [name, value] : client->options_.channel_args) {
        args.SetInt(name, value);
      }
      channels.push_back(grpc::CreateCustomChannel(
          address, grpc::InsecureChannelCredentials(), args));
    }
    client->channels_.push_back(std::move(channels));
  }
  return client;
}

std::vector<ShardPiece> RawClient::Pieces(const Range& r, size_t esize) const {
  // As ShardClient::Pieces.
  const uint64_t align = plan_.alignment();
  const uint64_t max_elems = std::max<uint64_t>(
      align, options_.max_piece_bytes / esize / align * align);
  std::vector<ShardPiece> out;
  for (const ShardPiece& p : plan_.Split(r)) {
    for (uint64_t b = p.range.begin; b < p.range.end;) {
      const uint64_t e = std::min(p.range.end, (b / align) * align + max_elems);
      out.push_back(ShardPiece{p.server, Range{b, e}});
      b = e;
    }
  }
  return out;
}

const std::shared_ptr<grpc::Channel>& RawClient::Channel(const ShardPiece& p,
                                                         size_t index) const {
  const auto& channels = channels_[p.server];
  // `index` counts pieces per call; the per-server ordinal would be
  // slightly better balanced when servers own different piece counts.
  const uint64_t salt = options_.spread ? index : p.range.begin;
  return channels[salt % channels.size()];
}

absl::Status RawClient::Gather(const Range& r, v1::DType dtype, void* out,
                               uint64_t* step) {
  const size_t esize = DTypeSize(dtype);
  if (esize == 0) return absl::InvalidArgumentError("unknown dtype");
  const std::vector<ShardPiece> pieces = Pieces(r, esize);
  std::vector<uint64_t> steps(pieces.size(), 0);
  absl::Status s = RunAll(pieces.size(), [&](size_t i) {
    char* dst =
        static_cast<char*>(out) + (pieces[i].range.begin - r.begin) * esize;
    const auto& channel = Channel(pieces[i], i);
    return options_.raw
               ? GatherPieceRaw(pieces[i], dtype, channel, dst, &steps[i])
               : GatherPieceProto(pieces[i], dtype, channel, dst, &steps[i]);
  });
  if (!s.ok()) return s;
  for (uint64_t x : steps) {
    if (x != steps.front()) return absl::AbortedError("steps differ");
  }
  if (step != nullptr && !steps.empty()) *step = steps.front();
  return absl::OkStatus();
}

absl::Status RawClient::GatherPieceRaw(
    const ShardPiece& p, v1::DType dtype,
    const std::shared_ptr<grpc::Channel>& channel, char* out,
    uint64_t* step) const {
  const size_t esize = DTypeSize(dtype);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + options_.deadline);
  v1::GatherRequest req;
  req.set_job_id(job_id_);
  req.set_offset(p.range.begin);
  req.set_length(p.range.size());
  req.set_dtype(dtype);
  const grpc::internal::RpcMethod method(
      kGatherMethod, grpc::internal::RpcMethod::SERVER_STREAMING, channel);
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
          channel.get(), method, &ctx, req));
  const uint64_t total = p.range.size() * esize;
  uint64_t received = 0;  // bytes
  bool first = true;
  absl::Status framing = absl::OkStatus();
  grpc::ByteBuffer message;
  while (framing.ok() && reader->Read(&message)) {
    // GatherChunk: 1 step (varint), 2 offset (varint), 3 data (bytes), in
    // any order.
    SliceReader in(message);
    uint64_t chunk_step = 0, chunk_offset = 0, data_bytes = 0;
    bool have_data = false;
    char* const dst = out + received;
    while (!in.done()) {
      uint32_t field = 0, wire = 0;
      if (!in.ReadTag(&field, &wire)) {
        framing = absl::DataLossError("malformed GatherChunk");
        break;
      }
      if (field == 1 && wire == kWireVarint) {
        if (!in.ReadVarint(&chunk_step)) framing = absl::DataLossError("step");
      } else if (field == 2 && wire == kWireVarint) {
        if (!in.ReadVarint(&chunk_offset)) {
          framing = absl::DataLossError("offset");
        }
      } else if (field == 3 && wire == kWireLengthDelimited) {
        uint64_t n = 0;
        if (have_data || !in.ReadVarint(&n) || n > total - received ||
            n % esize != 0) {
          framing = absl::DataLossError("data length");
          break;
        }
        char* d = dst;
        in.Consume(n, [&d](const uint8_t* src, size_t k) {
          std::memcpy(d, src, k);
          d += k;
          return true;
        });
        data_bytes = n;
        have_data = true;
      } else if (!in.SkipField(wire)) {
        framing = absl::DataLossError("malformed GatherChunk field");
      }
      if (!framing.ok()) break;
    }
    if (!framing.ok()) break;
    if (chunk_offset != p.range.begin + received / esize ||
        (!first && chunk_step != *step)) {
      framing = absl::DataLossError(
          absl::StrCat("unexpected chunk at offset ", chunk_offset));
      break;
    }
    *step = chunk_step;
    first = false;
    received += data_bytes;
  }
  if (!framing.ok()) ctx.TryCancel();
  const grpc::Status st = reader->Finish();
  if (!framing.ok()) return framing;
  if (!st.ok()) return FromGrpc(st, "Gather");
  if (received != total) return absl::DataLossError("short gather");
  return absl::OkStatus();
}

absl::Status RawClient::GatherPieceProto(
    const ShardPiece& p, v1::DType dtype,
    const std::shared_ptr<grpc::Channel>& channel, char* out,
    uint64_t* step) const {
  // As ShardClient::GatherPiece (minus retries).
  const size_t esize = DTypeSize(dtype);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + options_.deadline);
  v1::GatherRequest req;
  req.set_job_id(job_id_);
  req.set_offset(p.range.begin);
  req.set_length(p.range.size());
  req.set_dtype(dtype);
  v1::ShardService::Stub stub(channel);
  auto reader = stub.Gather(&ctx, req);
  v1::GatherChunk chunk;
  uint64_t received = 0;
  bool first = true;
  absl::Status framing = absl::OkStatus();
  while (reader->Read(&chunk)) {
    const uint64_t n = chunk.data().size() / esize;
    if (chunk.data().size() % esize != 0 ||
        chunk.offset() != p.range.begin + received ||
        n > p.range.size() - received || (!first && chunk.step() != *step)) {
      framing = absl::DataLossError("malformed chunk");
      ctx.TryCancel();
      break;
    }
    *step = chunk.step();
    first = false;
    std::memcpy(out + received * esize, chunk.data().data(),
                chunk.data().size());
    received += n;
  }
  const grpc::Status st = reader->Finish();
  if (!framing.ok()) return framing;
  if (!st.ok()) return FromGrpc(st, "Gather");
  if (received != p.range.size()) return absl::DataLossError("short gather");
  return absl::OkStatus();
}

absl::Status RawClient::Push(const Range& r, v1::DType dtype, const void* data,
                             const PushId& id) {
  const size_t esize = DTypeSize(dtype);
  if (esize == 0) return absl::InvalidArgumentError("unknown dtype");
  const std::vector<ShardPiece> pieces = Pieces(r, esize);
  return RunAll(pieces.size(), [&](size_t i) {
    const char* src = static_cast<const char*>(data) +
                      (pieces[i].range.begin - r.begin) * esize;
    const auto& channel = Channel(pieces[i], i);
    return options_.raw ? PushPieceRaw(pieces[i], dtype, channel, src, id)
                        : PushPieceProto(pieces[i], dtype, channel, src, id);
  });
}

absl::Status RawClient::PushPieceRaw(
    const ShardPiece& p, v1::DType dtype,
    const std::shared_ptr<grpc::Channel>& channel, const char* data,
    const PushId& id) const {
  const size_t esize = DTypeSize(dtype);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + options_.deadline);
  v1::PushGradientsResponse resp;
  const grpc::internal::RpcMethod method(
      kPushMethod, grpc::internal::RpcMethod::CLIENT_STREAMING, channel);
  std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
      grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(
          channel.get(), method, &ctx, &resp));
  v1::PushGradientsRequest first;
  v1::PushHeader* h = first.mutable_header();
  h->set_job_id(job_id_);
  h->set_epoch(id.epoch);
  h->set_step(id.step);
  h->set_slot(id.slot);
  h->set_offset(p.range.begin);
  h->set_length(p.range.size());
  h->set_dtype(dtype);
  h->set_idempotency_key(absl::StrCat(id.key_prefix, "/", p.range.begin));
  const std::string header = first.SerializeAsString();
  const uint64_t total = p.range.size() * esize;
  const uint64_t chunk = kMaxChunkBytes / esize * esize;
  for (uint64_t off = 0; off < total; off += chunk) {
    const uint64_t n = std::min<uint64_t>(chunk, total - off);
    // Field 1 (header, first message only), then field 2 = the caller's
    // bytes, referenced (not copied) by a static slice. The caller's buffer
    // outlives the call, so the transport may read it until Finish().
    std::string prefix = off == 0 ? header : std::string();
    prefix.push_back(static_cast<char>((2 << 3) | kWireLengthDelimited));
    PutVarint(&prefix, n);
    const grpc::Slice slices[2] = {
        grpc::Slice(prefix),
        grpc::Slice(data + off, n, grpc::Slice::STATIC_SLICE)};
    grpc::ByteBuffer message(slices, 2);
    if (!writer->Write(message)) break;  // the server answered early
  }
  writer->WritesDone();
  return FromGrpc(writer->Finish(), "PushGradients");
}

absl::Status RawClient::PushPieceProto(
    const ShardPiece& p, v1::DType dtype,
    const std::shared_ptr<grpc::Channel>& channel, const char* data,
    const PushId& id) const {
  // As ShardClient::PushPiece (minus retries).
  const size_t esize = DTypeSize(dtype);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + options_.deadline);
  v1::PushGradientsResponse resp;
  v1::ShardService::Stub stub(channel);
  auto writer = stub.PushGradients(&ctx, &resp);
  v1::PushGradientsRequest msg;
  v1::PushHeader* h = msg.mutable_header();
  h->set_job_id(job_id_);
  h->set_epoch(id.epoch);
  h->set_step(id.step);
  h->set_slot(id.slot);
  h->set_offset(p.range.begin);
  h->set_length(p.range.size());
  h->set_dtype(dtype);
  h->set_idempotency_key(absl::StrCat(id.key_prefix, "/", p.range.begin));
  const uint64_t total = p.range.size() * esize;
  const uint64_t chunk = kMaxChunkBytes / esize * esize;
  for (uint64_t off = 0; off < total; off += chunk) {
    msg.set_data(data + off, std::min<uint64_t>(chunk, total - off));
    if (!writer->Write(msg)) break;
    msg.clear_header();
  }
  writer->WritesDone();
  return FromGrpc(writer->Finish(), "PushGradients");
}

}  // namespace bench
}  // namespace zeroshard
