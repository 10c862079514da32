// variant_server: zeroshard-server with the data-plane changes proposed for
// server/ applied, for transfer_experiments (it is an experiment, not a
// server to deploy). Same flags and start-up/shutdown contract as
// //server:zeroshard-server (so LocalFleet starts it), plus:
//
//   --raw        Gather and PushGradients as raw (grpc::ByteBuffer)
//                callback methods: a gather chunk is copied once, from the
//                store straight into a pooled slice that gRPC sends (stock:
//                store -> std::string -> freshly allocated serialized
//                slice); a pushed chunk is converted straight from the
//                received slices into the gradient buffer (stock: slices ->
//                std::string -> gradient buffer). Other methods are the
//                stock ShardServiceImpl's.
//   --mallopt    keep freed 1 MiB message buffers in the heap instead of
//                returning them to the kernel (M_MMAP_THRESHOLD 16 MiB,
//                M_TRIM_THRESHOLD 2 GiB, M_TOP_PAD 64 MiB); without it
//                every message lands in freshly faulted, zeroed pages.
//   --arena_max=N  mallopt(M_ARENA_MAX, N) (0: glibc's default of 8 per
//                core); one arena keeps received buffers in reused pages.
//   --grpc_init_ref  hold one extra gRPC library reference (grpc_init()
//                without grpc_shutdown()), so that exiting does not run
//                grpc_shutdown(): in gRPC 1.51 that joins an executor thread
//                which may sit in a 10 s poll (tcp_posix's backup poller
//                after large writes), so the stock server can take up to
//                ~10 s to exit after SIGTERM and LocalFleet SIGKILLs it.
//   --channel_args=name=value;...  extra integer gRPC server arguments
//                (';'-separated: --server_args of the harness splits on ',').
#include <malloc.h>
#include <signal.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "common/flags.h"
#include "common/model_spec.h"
#include "grpc/grpc.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/shard_service.h"
#include "server/shard_store.h"
#include "tests/bench/raw_wire.h"

namespace zeroshard {
namespace bench {
namespace {

// Buffers for outgoing gather chunks, recycled when gRPC drops its last
// reference to the slice. Never destroyed (slices may be released late).
class ChunkPool {
 public:
  static constexpr size_t kBytes = kMaxChunkBytes + 64;
  static ChunkPool& Get() {
    static ChunkPool* pool = new ChunkPool();
    return *pool;
  }
  char* Take() {
    {
      absl::MutexLock l(&mu_);
      if (!free_.empty()) {
        char* p = free_.back();
        free_.pop_back();
        return p;
      }
    }
    return new char[kBytes];
  }
  static void Release(void* p) {
    ChunkPool& pool = Get();
    absl::MutexLock l(&pool.mu_);
    pool.free_.push_back(static_cast<char*>(p));
  }

 private:
  absl::Mutex mu_;
  std::vector<char*> free_;
};

class GatherReactor : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  GatherReactor(ShardStore* store, const grpc::ByteBuffer* request)
      : store_(store) {
    grpc::Slice flat;
    if (!request->DumpToSingleSlice(&flat).ok() ||
        !req_.ParseFromArray(flat.begin(), static_cast<int>(flat.size()))) {
      store_->CountRejected();
      Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "malformed GatherRequest"));
      return;
    }
    const absl::Status s = store_->CheckGather(req_);
    if (!s.ok()) {
      Finish(ToGrpcStatus(s));
      return;
    }
    esize_ = DTypeSize(req_.dtype());
    Next();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"));
      return;
    }
    Next();
  }
  void OnDone() override { delete this; }

 private:
  void Next() {
    if (done_ == req_.length()) {
      Finish(grpc::Status::OK);
      return;
    }
    const uint64_t n =
        std::min<uint64_t>(kMaxChunkBytes / esize_, req_.length() - done_);
    const uint64_t bytes = n * esize_;
    char* buf = ChunkPool::Get().Take();
    uint8_t* p = reinterpret_cast<uint8_t*>(buf);
    // GatherChunk with the data field first (protobuf accepts fields in any
    // order): 3 data, then 1 step and 2 offset once the step is known.
    size_t k = 0;
    p[k++] = (3 << 3) | kWireLengthDelimited;
    k += PutVarint(p + k, bytes);
    uint64_t step = 0;
    const absl::Status s = store_->GatherInto(req_.offset() + done_, n,
                                              req_.dtype(), p + k, &step);
    if (!s.ok()) {
      ChunkPool::Release(buf);
      Finish(ToGrpcStatus(s));
      return;
    }
    k += bytes;
    if (done_ == 0) first_step_ = step;
    if (step != first_step_) {
      ChunkPool::Release(buf);
      Finish(grpc::Status(grpc::StatusCode::ABORTED,
                          "a step was committed during the gather; retry"));
      return;
    }
    p[k++] = (1 << 3) | kWireVarint;
    k += PutVarint(p + k, step);
    p[k++] = (2 << 3) | kWireVarint;
    k += PutVarint(p + k, req_.offset() + done_);
    grpc::Slice slice(buf, k, &ChunkPool::Release, buf);
    message_ = grpc::ByteBuffer(&slice, 1);
    done_ += n;
    StartWrite(&message_);
  }

  ShardStore* const store_;
  v1::GatherRequest req_;
  size_t esize_ = 0;
  uint64_t done_ = 0;  // elements
  uint64_t first_step_ = 0;
  grpc::ByteBuffer message_;
};

class PushReactor : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  PushReactor(ShardStore* store, grpc::ByteBuffer* response)
      : store_(store), response_(response) {
    StartRead(&message_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      End();
      return;
    }
    bool answered = false;
    const grpc::Status s = Consume(&answered);
    if (!s.ok() || answered) {
      Finish(s);
      return;
    }
    ++messages_;
    StartRead(&message_);
  }
  void OnDone() override { delete this; }

 private:
  grpc::Status Invalid(const std::string& message) {
    store_->CountRejected();
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message);
  }

  // Feeds `n` payload bytes to the session, carrying an element split
  // across slices over to the next slice.
  absl::Status Feed(const uint8_t* p, size_t n) {
    const size_t esize = DTypeSize(dtype_);
    if (carry_n_ > 0) {
      const size_t take = std::min(n, esize - carry_n_);
      std::memcpy(carry_ + carry_n_, p, take);
      carry_n_ += take;
      p += take;
      n -= take;
      if (carry_n_ < esize) return absl::OkStatus();
      carry_n_ = 0;
      absl::Status s = session_->AddChunk(carry_, esize);
      if (!s.ok()) return s;
    }
    const size_t whole = n / esize * esize;
    if (whole > 0) {
      absl::Status s = session_->AddChunk(p, whole);
      if (!s.ok()) return s;
    }
    std::memcpy(carry_, p + whole, n - whole);
    carry_n_ = n - whole;
    return absl::OkStatus();
  }

  grpc::Status Consume(bool* answered) {
    SliceReader in(message_);
    while (!in.done()) {
      uint32_t field = 0, wire = 0;
      if (!in.ReadTag(&field, &wire)) {
        return Invalid("malformed PushGradientsRequest");
      }
      if (field == 1 && wire == kWireLengthDelimited) {
        uint64_t n = 0;
        std::string text;
        v1::PushHeader header;
        if (!in.ReadVarint(&n) || n > in.remaining() ||
            !in.ReadString(n, &text) || !header.ParseFromString(text)) {
          return Invalid("malformed PushHeader");
        }
        if (messages_ > 0 || session_ != nullptr) {
          return Invalid("only the first message may carry a header");
        }
        auto session = store_->BeginPush(header);
        if (!session.ok()) return ToGrpcStatus(session.status());
        session_ = std::move(*session);
        dtype_ = header.dtype();
        if (session_->duplicate()) {
          v1::PushGradientsResponse resp;
          resp.set_duplicate(true);
          resp.set_elements_received(session_->length());
          SetResponse(resp);
          *answered = true;
          return grpc::Status::OK;
        }
      } else if (field == 2 && wire == kWireLengthDelimited) {
        uint64_t n = 0;
        if (!in.ReadVarint(&n) || n > in.remaining()) {
          return Invalid("malformed data field");
        }
        if (session_ == nullptr) {
          return Invalid("the first PushGradients message must carry a header");
        }
        if (n > kMaxChunkBytes) {
          store_->CountRejected();
          return Invalid(absl::StrCat("chunk of ", n, " bytes is too large"));
        }
        absl::Status s = absl::OkStatus();
        in.Consume(n, [&](const uint8_t* p, size_t k) {
          s = Feed(p, k);
          return s.ok();
        });
        if (!s.ok()) return ToGrpcStatus(s);
        if (carry_n_ != 0) {
          return Invalid("chunk is not a whole number of elements");
        }
      } else if (!in.SkipField(wire)) {
        return Invalid("malformed PushGradientsRequest field");
      }
    }
    if (session_ == nullptr) {
      return Invalid("the first PushGradients message must carry a header");
    }
    return grpc::Status::OK;
  }

  void End() {
    if (session_ == nullptr) {
      Finish(Invalid("the first PushGradients message must carry a header"));
      return;
    }
    const absl::Status s = session_->Finish();
    if (!s.ok()) {
      Finish(ToGrpcStatus(s));
      return;
    }
    v1::PushGradientsResponse resp;
    resp.set_elements_received(session_->length());
    SetResponse(resp);
    Finish(grpc::Status::OK);
  }

  void SetResponse(const v1::PushGradientsResponse& resp) {
    grpc::Slice slice(resp.SerializeAsString());
    *response_ = grpc::ByteBuffer(&slice, 1);
  }

  ShardStore* const store_;
  grpc::ByteBuffer* const response_;
  grpc::ByteBuffer message_;
  std::unique_ptr<PushSession> session_;
  v1::DType dtype_ = v1::DTYPE_UNSPECIFIED;
  uint64_t messages_ = 0;
  uint8_t carry_[8];
  size_t carry_n_ = 0;
};

using RawBase = v1::ShardService::WithRawCallbackMethod_Gather<
    v1::ShardService::WithRawCallbackMethod_PushGradients<
        v1::ShardService::Service>>;

// Gather and PushGradients raw; everything else delegates to the stock
// implementation.
class RawService final : public RawBase {
 public:
  explicit RawService(ShardStore* store) : store_(store), stock_(store) {}

  grpc::Status RegisterModel(grpc::ServerContext* ctx,
                             const v1::RegisterModelRequest* req,
                             v1::RegisterModelResponse* resp) override {
    return stock_.RegisterModel(ctx, req, resp);
  }
  grpc::Status WriteParameters(
      grpc::ServerContext* ctx,
      grpc::ServerReader<v1::WriteParametersRequest>* reader,
      v1::WriteParametersResponse* resp) override {
    return stock_.WriteParameters(ctx, reader, resp);
  }
  grpc::Status GetStats(grpc::ServerContext* ctx,
                        const v1::GetStatsRequest* req,
                        v1::GetStatsResponse* resp) override {
    return stock_.GetStats(ctx, req, resp);
  }
  grpc::Status PrepareStep(grpc::ServerContext* ctx,
                           const v1::PrepareStepRequest* req,
                           v1::PrepareStepResponse* resp) override {
    return stock_.PrepareStep(ctx, req, resp);
  }
  grpc::Status CommitStep(grpc::ServerContext* ctx,
                          const v1::CommitStepRequest* req,
                          v1::CommitStepResponse* resp) override {
    return stock_.CommitStep(ctx, req, resp);
  }
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Gather(
      grpc::CallbackServerContext*, const grpc::ByteBuffer* request) override {
    return new GatherReactor(store_, request);
  }
  grpc::ServerReadReactor<grpc::ByteBuffer>* PushGradients(
      grpc::CallbackServerContext*, grpc::ByteBuffer* response) override {
    return new PushReactor(store_, response);
  }

 private:
  ShardStore* const store_;
  ShardServiceImpl stock_;
};

int Main(int argc, char** argv) {
  std::string host = "127.0.0.1";
  int64_t port = 0;
  std::string port_file;
  uint32_t shard_index = 0;
  uint32_t num_shards = 1;
  int64_t threads = 2;
  int64_t grpc_threads = 16;
  bool raw = true;
  bool tune_malloc = true;
  bool grpc_init_ref = true;
  int64_t arena_max = 0;
  std::string channel_args;
  FlagSet flags("variant_server",
                "variant_server [flags]\n\nzeroshard-server with the "
                "proposed data-plane changes (experiment).");
  flags.String("host", &host, "Address to listen on.");
  flags.Int64("port", &port, "TCP port; 0 picks a free one.");
  flags.String("port_file", &port_file, "Write the chosen port here.");
  flags.Uint32("shard_index", &shard_index, "This server's shard index k.");
  flags.Uint32("num_shards", &num_shards, "Number of shard servers K.");
  flags.Int64("threads", &threads, "Optimizer threads.");
  flags.Int64("grpc_threads", &grpc_threads, "gRPC sync-server threads.");
  flags.Bool("raw", &raw, "Raw ByteBuffer Gather/PushGradients.");
  flags.Bool("mallopt", &tune_malloc,
             "Keep freed message buffers in the heap (glibc mallopt).");
  flags.Int64("arena_max", &arena_max, "glibc M_ARENA_MAX (0: default).");
  flags.Bool("grpc_init_ref", &grpc_init_ref,
             "Never run grpc_shutdown() at exit (fast shutdown).");
  flags.String("channel_args", &channel_args,
               "Extra integer server arguments, name=value;...");
  std::vector<std::string> rest = flags.ParseOrExit(argc, argv);
  if (!rest.empty() || num_shards == 0 || shard_index >= num_shards) {
    ExitWithError(flags.program(), "bad arguments");
  }
  if (tune_malloc) {
    mallopt(M_MMAP_THRESHOLD, 16 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    mallopt(M_TOP_PAD, 64 << 20);
  }
  if (arena_max > 0) mallopt(M_ARENA_MAX, static_cast<int>(arena_max));

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // After blocking the signals: grpc_init() starts threads, which inherit
  // the mask (a thread with SIGTERM unblocked would die of it).
  if (grpc_init_ref) grpc_init();  // never released: see the file comment

  StoreOptions options;
  options.shard_index = shard_index;
  options.num_shards = num_shards;
  options.threads = static_cast<int>(threads);
  ShardStore store(options);
  ShardServiceImpl stock(&store);
  RawService raw_service(&store);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int bound_port = 0;
  builder.AddListeningPort(absl::StrCat(host, ":", port),
                           grpc::InsecureServerCredentials(), &bound_port);
  if (raw) {
    builder.RegisterService(&raw_service);
  } else {
    builder.RegisterService(&stock);
  }
  builder.SetMaxReceiveMessageSize(static_cast<int>(kMaxChunkBytes + 4096));
  builder.SetMaxSendMessageSize(static_cast<int>(kMaxChunkBytes + 4096));
  if (!channel_args.empty()) {
    for (absl::string_view arg : absl::StrSplit(channel_args, ';')) {
      std::vector<std::string> kv = absl::StrSplit(arg, '=');
      int value = 0;
      if (kv.size() != 2 || !absl::SimpleAtoi(kv[1], &value)) {
        ExitWithError(flags.program(), "bad --channel_args");
      }
      builder.AddChannelArgument(kv[0], value);
    }
  }
  grpc::ResourceQuota quota("variant_server");
  quota.SetMaxThreads(static_cast<int>(grpc_threads));
  builder.SetResourceQuota(quota);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || bound_port == 0) {
    ExitWithError(flags.program(), "cannot listen", 1);
  }
  server->GetHealthCheckService()->SetServingStatus(true);
  if (!port_file.empty()) {
    const std::string tmp = port_file + ".tmp";
    std::ofstream(tmp) << bound_port << "\n";
    if (std::rename(tmp.c_str(), port_file.c_str()) != 0) {
      ExitWithError(flags.program(), "cannot write --port_file", 1);
    }
  }
  std::printf(
      "variant_server: shard %u/%u listening on %s:%d (raw=%d "
      "mallopt=%d)\n",
      shard_index, num_shards, host.c_str(), bound_port, raw, tune_malloc);
  std::fflush(stdout);
  int signo = 0;
  sigwait(&signals, &signo);
  server->GetHealthCheckService()->SetServingStatus(false);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server->Wait();
  return 0;
}

}  // namespace
}  // namespace bench
}  // namespace zeroshard

int main(int argc, char** argv) { return zeroshard::bench::Main(argc, argv); }
