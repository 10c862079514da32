// Fuzz target for the service layer: request bytes through the real gRPC
// handlers (ShardServiceImpl, MembershipServiceImpl, their framing and
// deserialization) of a fresh server per input, in this process, listening
// on a loopback port and called with a generic (byte) stub over TCP (gRPC's
// in-process transport differs: a unary call given two messages never
// ends there, while over HTTP/2 it is answered). The store fuzzer
// (store_fuzzer.cc) covers the store's rules; this one covers everything in
// front of them.
//
//   input   := config call*
//   config  := 1 byte: num_shards = 1 + (b & 1), shard_index = (b >> 1) %
//              num_shards
//   call    := method (1 byte, modulo kNumMethods), count (1 byte, at most
//              kMaxMessages) and that many messages
//   message := length (2 bytes, little endian, clamped to what is left),
//              then the message's bytes, sent as they are
//
// Method kFinalizeLast is Checkpoint phase 2 made from the call's first
// message (a CheckpointRequest) and the shard entry of the last phase-1
// answer (whose size and CRC an input cannot know).
//
// Every call is made as a bidirectional stream, whatever its method's
// shape: a unary method may get zero or several messages, a streaming one
// a truncated or malformed message anywhere.
//
// Invariants (each aborts on violation, naming the method and the status):
//   - no crash and no sanitizer report (under clang);
//   - every call ends within kCallDeadline (no handler hangs);
//   - no UNKNOWN status, and no INTERNAL status: malformed bytes are the
//     client's error (INVALID_ARGUMENT), not the server's;
//   - error messages are bounded (kMaxMessageBytes): a server never
//     echoes a client's string whole;
//   - a rejected ShardService call changes nothing: the store's committed
//     state (job, spec, step, epoch, optimizer steps, contributions, the
//     trainer state, checkpoints, awaiting_restore) and its master weights
//     are bit-identical before and after.
//
// The binary is built two ways: by Bazel with gcc as
// //tests/fuzz:service_fuzz_test (service_fuzz_main.cc runs the seeds and
// a fixed number of deterministic mutations), and by build_and_run.sh with
// clang++ -fsanitize=fuzzer for open-ended fuzzing. SeedInputs() below
// gives both their seeds (valid step sequences and typical misuse).
#include "tests/fuzz/service_fuzzer.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "proto/zeroshard.pb.h"
#include "server/auth/request_guard.h"
#include "server/membership/membership.h"
#include "server/membership_service.h"
#include "server/shard_service.h"
#include "server/store/shard_store.h"

namespace zeroshard {
namespace fuzz {
namespace {

struct Method {
  const char* path;
  bool shard;  // ShardService (state checked), else MembershipService
};
constexpr Method kMethods[] = {
    {"/zeroshard.v1.ShardService/RegisterModel", true},
    {"/zeroshard.v1.ShardService/WriteParameters", true},
    {"/zeroshard.v1.ShardService/Checkpoint", true},
    {"/zeroshard.v1.ShardService/Restore", true},
    {"/zeroshard.v1.ShardService/GetStats", true},
    {"/zeroshard.v1.ShardService/Gather", true},
    {"/zeroshard.v1.ShardService/PushGradients", true},
    {"/zeroshard.v1.ShardService/PrepareStep", true},
    {"/zeroshard.v1.ShardService/CommitStep", true},
    {"/zeroshard.v1.MembershipService/Join", false},
    {"/zeroshard.v1.MembershipService/Heartbeat", false},
    {"/zeroshard.v1.MembershipService/Leave", false},
    {"/zeroshard.v1.MembershipService/Rendezvous", false},
    // Not a method: Checkpoint phase 2 built from the input's first message
    // (a CheckpointRequest) plus the shard entry of the last phase-1
    // answer, which an input cannot know (its size and CRC).
    {"/zeroshard.v1.ShardService/Checkpoint", true},
};
constexpr size_t kCheckpoint = 2;
constexpr size_t kFinalizeLast = 13;
constexpr size_t kNumMethods = sizeof(kMethods) / sizeof(kMethods[0]);
constexpr size_t kMaxMessages = 8;
constexpr size_t kMaxCalls = 24;
constexpr auto kCallDeadline = std::chrono::milliseconds(20000);
// Rendezvous may block up to 2 s waiting for peers: cancel it sooner.
constexpr auto kRendezvousDeadline = std::chrono::milliseconds(200);
constexpr size_t kMaxMessageBytes = 4096;
// A registered model's state may take at most this (the guard's limit, as
// --max_state_bytes): huge specs are refused, not allocated.
constexpr uint64_t kMaxStateBytes = 64ull << 20;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "service_fuzzer: invariant violated: %s\n",
               what.c_str());
  std::fflush(stderr);
  std::abort();
}

std::string CheckpointDir() {
  static const std::string dir = [] {
    const char* base = std::getenv("TEST_TMPDIR");
    std::string d = absl::StrCat(base != nullptr ? base : "/tmp",
                                 "/service_fuzzer_ckpt.", getpid());
    return d;
  }();
  return dir;
}

// A deadline `d` from now on the monotonic clock (a step of the wall clock
// cannot expire it).
gpr_timespec MonotonicIn(std::chrono::milliseconds d) {
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                      gpr_time_from_millis(d.count(), GPR_TIMESPAN));
}

// One fresh server: a store, its guard, both services, on loopback.
class Harness {
 public:
  Harness(uint32_t num_shards, uint32_t shard_index) {
    // Each input starts from an empty checkpoint directory.
    std::error_code ignored;
    std::filesystem::remove_all(CheckpointDir(), ignored);
    StoreOptions options;
    options.num_shards = num_shards;
    options.shard_index = shard_index;
    options.threads = 1;
    options.checkpoint_dir = CheckpointDir();
    store_ = std::make_unique<ShardStore>(options);
    guard_ = std::make_unique<RequestGuard>(
        std::nullopt, [this] { return store_->job_id(); }, kMaxStateBytes);
    shard_ = std::make_unique<ShardServiceImpl>(store_.get(), guard_.get());
    MembershipOptions m;
    m.lease_ms = 1000;
    m.committed_step = [this] { return store_->Stats().step; };
    membership_ = std::make_unique<Membership>(m);
    members_ = std::make_unique<MembershipServiceImpl>(membership_.get(),
                                                       guard_.get());
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(shard_.get());
    builder.RegisterService(members_.get());
    builder.SetMaxReceiveMessageSize((1 << 20) + 4096);
    server_ = builder.BuildAndStart();
    if (server_ == nullptr || port == 0) {
      Fail("the server did not start on a loopback port");
    }
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(64 << 20);
    stub_ = std::make_unique<grpc::GenericStub>(
        grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port),
                                  grpc::InsecureChannelCredentials(), args));
  }
  ~Harness() {
    server_->Shutdown(MonotonicIn(std::chrono::seconds(5)));
    cq_.Shutdown();
    void* tag;
    bool ok;
    while (cq_.Next(&tag, &ok)) {
    }
  }

  // Sends `messages` on a stream of `method` and reads every response.
  grpc::Status Call(const Method& method,
                    const std::vector<std::string>& messages,
                    std::vector<std::string>* responses) {
    grpc::ClientContext ctx;
    const bool rendezvous = std::strstr(method.path, "Rendezvous") != nullptr;
    ctx.set_deadline(
        MonotonicIn(rendezvous ? kRendezvousDeadline : kCallDeadline));
    std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call =
        stub_->PrepareCall(&ctx, method.path, &cq_);
    call->StartCall(Tag(1));
    const bool started = Await(1, method);
    bool writing = started;
    for (size_t i = 0; writing && i < messages.size(); ++i) {
      grpc::Slice slice(messages[i].data(), messages[i].size());
      grpc::ByteBuffer buffer(&slice, 1);
      call->Write(buffer, Tag(2));
      writing = Await(2, method);
    }
    if (writing) {
      call->WritesDone(Tag(3));
      Await(3, method);
    }
    // Every answer is read before Finish, also after a failed write (the
    // server may have answered and ended the stream while messages were
    // still being sent): gRPC delivers the status only once the messages
    // before it are read, so skipping them would wait out the deadline.
    bool open = started;
    for (int reads = 0; open; ++reads) {
      grpc::ByteBuffer response;
      call->Read(&response, Tag(4));
      open = Await(4, method);
      if (open) responses->push_back(ToString(response));
      if (reads > 100000) Fail(absl::StrCat(method.path, ": endless stream"));
    }
    grpc::Status status;
    call->Finish(&status, Tag(5));
    Await(5, method);
    return status;
  }

  ShardStore& store() { return *store_; }

 private:
  static void* Tag(intptr_t i) { return reinterpret_cast<void*>(i); }

  static std::string ToString(const grpc::ByteBuffer& buffer) {
    std::vector<grpc::Slice> slices;
    std::string out;
    if (!buffer.Dump(&slices).ok()) return out;
    for (const grpc::Slice& slice : slices) {
      out.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    }
    return out;
  }

  // Waits for the completion of operation `tag`; false when the stream is
  // done (the operation failed).
  bool Await(intptr_t tag, const Method& method) {
    void* got = nullptr;
    bool ok = false;
    switch (cq_.AsyncNext(
        &got, &ok, MonotonicIn(kCallDeadline + std::chrono::seconds(10)))) {
      case grpc::CompletionQueue::GOT_EVENT:
        break;
      default:
        Fail(absl::StrCat(method.path, ": a call did not finish"));
    }
    if (got != Tag(tag)) Fail("completion queue out of order");
    return ok;
  }

  std::unique_ptr<ShardStore> store_;
  std::unique_ptr<RequestGuard> guard_;
  std::unique_ptr<ShardServiceImpl> shard_;
  std::unique_ptr<Membership> membership_;
  std::unique_ptr<MembershipServiceImpl> members_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<grpc::GenericStub> stub_;
  grpc::CompletionQueue cq_;
};

// The store's committed state and master weights, as bytes.
std::string StateDigest(ShardStore& store) {
  StoreStats s = store.Stats();
  v1::ModelSpec spec;
  store.SpecInto(&spec);
  std::string out = absl::StrCat(
      store.job_id(), "|", spec.SerializeAsString(), "|", s.step, "|",
      s.optimizer_steps, "|", s.epoch, "|", s.contributions_applied, "|",
      s.elements_applied, "|", s.awaiting_restore, "|", s.restored_step, "|",
      s.trainer_state.SerializeAsString(), "|", s.owned.begin, "|", s.owned.end,
      "|", s.bytes_held, "|", s.checkpoints_written, "|");
  for (uint64_t c : s.checkpoint_steps) absl::StrAppend(&out, c, ",");
  if (!s.owned.empty() && !store.job_id().empty()) {
    std::string weights(s.owned.size() * sizeof(float), '\0');
    uint64_t step = 0;
    absl::Status gathered = store.GatherInto(
        s.owned.begin, s.owned.size(), v1::DTYPE_FP32, weights.data(), &step);
    if (!gathered.ok()) {
      Fail(absl::StrCat("gathering the owned range failed: ",
                        gathered.ToString()));
    }
    out += weights;
  }
  return out;
}

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  bool done() const { return p_ >= end_; }
  uint8_t Byte() { return done() ? 0 : *p_++; }
  std::string Bytes() {
    size_t n = Byte();
    n |= static_cast<size_t>(Byte()) << 8;
    n = std::min(n, static_cast<size_t>(end_ - p_));
    std::string s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return s;
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

// ZS_FUZZ_VERBOSE=1: one line per call (replaying an input).
bool Verbose() {
  static const bool verbose = std::getenv("ZS_FUZZ_VERBOSE") != nullptr;
  return verbose;
}

// Calls made and calls answered OK, per method (for the engine's summary).
size_t calls_made[kNumMethods];
size_t calls_ok[kNumMethods];

}  // namespace

std::string CallSummary() {
  std::string out;
  for (size_t m = 0; m < kNumMethods; ++m) {
    absl::StrAppend(&out, out.empty() ? "" : " ",
                    m == kFinalizeLast
                        ? "FinalizeLast"
                        : std::strrchr(kMethods[m].path, '/') + 1,
                    "=", calls_ok[m], "/", calls_made[m]);
  }
  return out;
}

void RunOne(const uint8_t* data, size_t size) {
  Reader in(data, size);
  const uint8_t config = in.Byte();
  const uint32_t num_shards = 1 + (config & 1);
  const uint32_t shard_index = (config >> 1) % num_shards;
  Harness h(num_shards, shard_index);
  std::optional<v1::CheckpointShard> last_shard;
  for (size_t calls = 0; !in.done() && calls < kMaxCalls; ++calls) {
    const size_t index = in.Byte() % kNumMethods;
    const Method& method = kMethods[index];
    const size_t count = in.Byte() % (kMaxMessages + 1);
    std::vector<std::string> messages;
    for (size_t i = 0; i < count && !in.done(); ++i) {
      messages.push_back(in.Bytes());
    }
    if (index == kFinalizeLast) {
      v1::CheckpointRequest finalize;
      if (!messages.empty()) finalize.ParseFromString(messages[0]);
      finalize.set_finalize(true);
      if (last_shard.has_value()) *finalize.add_shards() = *last_shard;
      messages = {finalize.SerializeAsString()};
    }
    const std::string before = method.shard ? StateDigest(h.store()) : "";
    std::vector<std::string> responses;
    grpc::Status status = h.Call(method, messages, &responses);
    v1::CheckpointResponse phase1;
    if (index == kCheckpoint && status.ok() && responses.size() == 1 &&
        phase1.ParseFromString(responses[0]) && phase1.has_shard()) {
      last_shard = phase1.shard();
    }
    ++calls_made[index];
    if (Verbose()) {
      std::fprintf(stderr, "service_fuzzer: %s\n",
                   absl::StrCat(method.path, " with ", messages.size(),
                                " message(s): ", status.error_code(), " ",
                                status.error_message().substr(0, 200))
                       .c_str());
    }
    if (status.ok()) ++calls_ok[index];
    const std::string context =
        absl::StrCat(method.path, " with ", messages.size(),
                     " message(s) answered ", status.error_code(), " \"",
                     status.error_message().substr(0, 200), "\"");
    if (status.error_code() == grpc::StatusCode::UNKNOWN ||
        status.error_code() == grpc::StatusCode::INTERNAL) {
      Fail(context);
    }
    if (status.error_message().size() > kMaxMessageBytes) {
      Fail(absl::StrCat(context, ": a message of ",
                        status.error_message().size(), " bytes"));
    }
    if (method.shard &&
        status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      Fail(absl::StrCat(context, ": a handler hung"));
    }
    if (method.shard && !status.ok() && StateDigest(h.store()) != before) {
      Fail(absl::StrCat(context, ", and the store's state changed"));
    }
  }
}

}  // namespace fuzz
}  // namespace zeroshard

// libFuzzer: with ZS_FUZZ_WRITE_SEEDS=<dir>, writes SeedInputs() there
// and exits (build_and_run.sh's seed corpus).
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  if (const char* dir = std::getenv("ZS_FUZZ_WRITE_SEEDS")) {
    const std::vector<std::string> seeds = zeroshard::fuzz::SeedInputs();
    for (size_t i = 0; i < seeds.size(); ++i) {
      const std::string path = absl::StrCat(dir, "/seed-", i);
      std::FILE* f = std::fopen(path.c_str(), "wb");
      if (f == nullptr ||
          std::fwrite(seeds[i].data(), 1, seeds[i].size(), f) !=
              seeds[i].size() ||
          std::fclose(f) != 0) {
        std::fprintf(stderr, "service_fuzzer: cannot write %s\n", path.c_str());
        std::exit(1);
      }
    }
    std::fprintf(stderr, "service_fuzzer: wrote %zu seeds to %s\n",
                 seeds.size(), dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  zeroshard::fuzz::RunOne(data, size);
  return 0;
}
