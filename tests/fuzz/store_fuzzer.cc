// libFuzzer target for ShardStore (server/store/shard_store.h), without gRPC:
// the input is a store configuration byte followed by a sequence of operations
// on one fresh store, each parsed from the bytes the way the gRPC adapter
// (server/shard_service.cc) would receive them:
//
//   input   := config op*
//   config  := 1 byte: num_shards = 1 + (b & 3), shard_index = (b >> 2) %
//              num_shards
//   op      := opcode (1 byte, taken modulo kNumOps), length (2 bytes, little
//              endian, clamped to what is left), payload (length bytes)
//
//   kRegister  payload = serialized ModelSpec -> RegisterModel
//   kBeginPush payload = serialized PushHeader -> BeginPush (the session is
//              kept, at most kMaxSessions at once)
//   kAddChunk  payload[0] picks a session; the rest is the chunk. With bit 7
//              of payload[0] set, payload[1..3] give a chunk length up to
//              kMaxChunkBytes + 8 filled with a pattern (oversized chunks)
//   kFinish    payload[0] picks a session -> Finish (kept; may be fed again)
//   kDrop      payload[0] picks a session -> destroyed (unfinished: released)
//   kGather    payload = serialized GatherRequest -> CheckGather, then
//              GatherInto when accepted
//   kPrepare   payload = serialized PrepareStepRequest -> Prepare
//   kCommit    payload = serialized CommitStepRequest -> Commit
//   kWrite     payload = serialized WriteHeader -> CheckWrite, then
//              WriteParameters with pattern data when accepted
//   kStats     Stats, SpecInto, job_id
//
// The invariant: no crash and no sanitizer report; every error comes back
// as a status. A few cross-checks (an accepted range lies inside the owned
// range, a complete Prepare has every element) abort on violation.
//
// Memory: the store allocates (3 + contributions_per_step) x 4 + 2 bytes
// per owned element at registration, so specs over kMaxElements elements in
// total (or kMaxStateFloats with the gradient slots) are skipped before
// RegisterModel: legitimately huge specs must not OOM the fuzzer.
//
// Contract-breaking modes, ZS_FUZZ_LAX=<bits>: 1 also feeds chunks to
// duplicate sessions, 2 passes chunk pointers at arbitrary alignment; the
// gRPC adapter does neither, so they stay out of the default run (see the
// report in tests/fuzz/README.md).
//
// Seeds: with ZS_FUZZ_WRITE_SEEDS=<dir> in the environment the binary
// writes a small seed corpus (valid step sequences and typical errors) to
// <dir> and exits (see build_and_run.sh).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "common/model_spec.h"
#include "google/protobuf/stubs/logging.h"
#include "proto/zeroshard.pb.h"
#include "server/store/shard_store.h"

namespace zeroshard {
namespace fuzz {
namespace {

enum Op : uint8_t {
  kRegister = 0,
  kBeginPush,
  kAddChunk,
  kFinish,
  kDrop,
  kGather,
  kPrepare,
  kCommit,
  kWrite,
  kStats,
  kNumOps
};

constexpr uint64_t kMaxElements = 1 << 18;     // Ψ, over all tensors
constexpr uint64_t kMaxStateFloats = 1 << 22;  // Ψ × (4 + slots)
constexpr size_t kMaxSessions = 8;
constexpr size_t kBigChunkMax = kMaxChunkBytes + 8;

int lax = 0;  // ZS_FUZZ_LAX bits: 1 duplicate sessions, 2 misalignment

[[noreturn]] void Violation(const char* what) {
  std::fprintf(stderr, "store_fuzzer: invariant violated: %s\n", what);
  std::abort();
}

// Upper bound of the elements a spec would make the store allocate, or
// UINT64_MAX when above the caps. Dimensions < 1 count as 1: such a spec is
// rejected by ValidateSpec before anything is allocated.
uint64_t StateFloats(const v1::ModelSpec& spec) {
  uint64_t total = 0;
  for (const v1::TensorSpec& t : spec.tensors()) {
    uint64_t numel = 1;
    for (int64_t d : t.shape()) {
      const uint64_t dim = d < 1 ? 1 : static_cast<uint64_t>(d);
      if (dim > kMaxElements || numel * dim > kMaxElements) return UINT64_MAX;
      numel *= dim;
    }
    total += numel;
    if (total > kMaxElements) return UINT64_MAX;
  }
  const uint64_t slots = spec.contributions_per_step();
  if (slots > 1024) return 0;  // rejected by ValidateSpec
  const uint64_t floats = total * (4 + slots);
  return floats > kMaxStateFloats ? UINT64_MAX : floats;
}

// Deterministic float pattern (finite, with some negative zeros and
// subnormals) for written weights and oversized chunks.
float PatternFloat(uint64_t i, uint32_t salt) {
  const uint32_t h = static_cast<uint32_t>((i + salt) * 2654435761u);
  if ((h & 0xFF) == 0) return -0.0f;
  if ((h & 0xFF) == 1) return 1e-40f;
  return static_cast<float>(static_cast<int32_t>(h)) * 1e-9f;
}

class Runner {
 public:
  explicit Runner(uint8_t config) {
    StoreOptions o;
    o.num_shards = 1 + (config & 3);
    o.shard_index = (config >> 2) % o.num_shards;
    o.threads = 1;  // deterministic and fast: the caller does all the work
    store_ = std::make_unique<ShardStore>(o);
  }
  ~Runner() {
    sessions_.clear();  // before the store they point into
    store_.reset();
  }

  void Run(uint8_t op, const uint8_t* p, size_t n) {
    switch (op % kNumOps) {
      case kRegister:
        return Register(p, n);
      case kBeginPush:
        return BeginPush(p, n);
      case kAddChunk:
        return AddChunk(p, n);
      case kFinish:
        if (PushSession* s = Pick(p, n)) s->Finish().IgnoreError();
        return;
      case kDrop:
        if (!sessions_.empty()) {
          sessions_.erase(sessions_.begin() +
                          (n > 0 ? p[0] % sessions_.size() : 0));
        }
        return;
      case kGather:
        return Gather(p, n);
      case kPrepare:
        return Prepare(p, n);
      case kCommit: {
        v1::CommitStepRequest req;
        if (!req.ParseFromArray(p, static_cast<int>(n))) return;
        store_->Commit(req).status().IgnoreError();
        return;
      }
      case kWrite:
        return Write(p, n);
      case kStats:
        return CheckStats();
    }
  }

 private:
  PushSession* Pick(const uint8_t* p, size_t n) {
    if (sessions_.empty()) return nullptr;
    return sessions_[(n > 0 ? p[0] : 0) % sessions_.size()].get();
  }

  void Register(const uint8_t* p, size_t n) {
    v1::ModelSpec spec;
    if (!spec.ParseFromArray(p, static_cast<int>(n))) return;
    if (StateFloats(spec) == UINT64_MAX) return;  // too big for the fuzzer
    auto r = store_->RegisterModel(spec);
    if (r.ok()) {
      const StoreStats s = store_->Stats();
      if (!(r->owned == s.owned) || r->owned.end > r->total ||
          r->ranges.size() != store_->options().num_shards) {
        Violation("RegisterModel result inconsistent with Stats");
      }
    }
  }

  void BeginPush(const uint8_t* p, size_t n) {
    v1::PushHeader header;
    if (!header.ParseFromArray(p, static_cast<int>(n))) return;
    auto s = store_->BeginPush(header);
    if (!s.ok()) return;
    if (!(*s)->duplicate()) {
      const Range owned = store_->Stats().owned;
      if (header.offset() < owned.begin || header.length() > owned.size() ||
          header.offset() + header.length() > owned.end ||
          (*s)->length() != header.length()) {
        Violation("BeginPush accepted a range outside the owned range");
      }
    }
    if (sessions_.size() < kMaxSessions) sessions_.push_back(std::move(*s));
  }

  void AddChunk(const uint8_t* p, size_t n) {
    PushSession* s = Pick(p, n);
    // Contract (shard_store.h): a duplicate session is acknowledged without
    // reading data, so the adapter never feeds one.
    if (s == nullptr || (s->duplicate() && (lax & 1) == 0)) return;
    if (n > 0 && (p[0] & 0x80) != 0) {
      // An oversized (or merely large) chunk of pattern data.
      size_t len = 0;
      for (size_t i = 1; i < 4; ++i) len = len * 256 + (i < n ? p[i] : 0);
      len %= kBigChunkMax + 1;
      big_.resize(len);
      for (size_t i = 0; i < len; ++i) {
        big_[i] = static_cast<char>(i * 131 + (n > 4 ? p[4] : 0));
      }
      s->AddChunk(big_.data(), big_.size()).IgnoreError();
      return;
    }
    // The adapter hands over a protobuf `bytes` field: heap memory, aligned
    // for any element type. Copy to get the same (and to let ASan see the
    // exact extent).
    if ((lax & 2) != 0) {
      s->AddChunk(p + (n > 0), n > 0 ? n - 1 : 0).IgnoreError();
      return;
    }
    const std::string chunk(reinterpret_cast<const char*>(p) + (n > 0),
                            n > 0 ? n - 1 : 0);
    s->AddChunk(chunk.data(), chunk.size()).IgnoreError();
  }

  void Gather(const uint8_t* p, size_t n) {
    v1::GatherRequest req;
    if (!req.ParseFromArray(p, static_cast<int>(n))) return;
    if (!store_->CheckGather(req).ok()) return;
    const Range owned = store_->Stats().owned;
    if (req.offset() < owned.begin || req.length() > owned.size() ||
        req.offset() + req.length() > owned.end) {
      Violation("CheckGather accepted a range outside the owned range");
    }
    const size_t esize = DTypeSize(req.dtype());
    std::vector<char> out(req.length() * esize);
    uint64_t step = 0;
    store_
        ->GatherInto(req.offset(), req.length(), req.dtype(), out.data(), &step)
        .IgnoreError();
    if (step != store_->Stats().step) Violation("gather step != store step");
  }

  void Prepare(const uint8_t* p, size_t n) {
    v1::PrepareStepRequest req;
    if (!req.ParseFromArray(p, static_cast<int>(n))) return;
    auto r = store_->Prepare(req.job_id(), req.epoch(), req.step());
    if (r.ok() && r->complete && r->received_elements != r->expected_elements) {
      Violation("Prepare complete with missing elements");
    }
  }

  void Write(const uint8_t* p, size_t n) {
    v1::WriteHeader header;
    if (!header.ParseFromArray(p, static_cast<int>(n))) return;
    if (!store_->CheckWrite(header).ok()) return;
    const Range owned = store_->Stats().owned;
    if (header.offset() < owned.begin || header.length() > owned.size() ||
        header.offset() + header.length() > owned.end) {
      Violation("CheckWrite accepted a range outside the owned range");
    }
    std::vector<float> data(header.length());
    for (size_t i = 0; i < data.size(); ++i) {
      data[i] = PatternFloat(i, static_cast<uint32_t>(n));
    }
    store_
        ->WriteParameters(header.job_id(), header.offset(), data.data(),
                          data.size())
        .IgnoreError();
  }

  void CheckStats() {
    const StoreStats s = store_->Stats();
    v1::ModelSpec spec;
    store_->SpecInto(&spec);
    if (spec.job_id() != store_->job_id()) Violation("SpecInto vs job_id");
    if (s.optimizer_steps > s.step)
      Violation("more optimizer steps than steps");
  }

  std::unique_ptr<ShardStore> store_;
  std::vector<std::unique_ptr<PushSession>> sessions_;
  std::string big_;
};

// ------------------------------------------------------------ seed corpus

class SeedWriter {
 public:
  explicit SeedWriter(uint8_t config) { bytes_.push_back(config); }
  SeedWriter& Op(uint8_t op, const std::string& payload) {
    const size_t n = std::min<size_t>(payload.size(), 0xFFFF);
    bytes_.push_back(op);
    bytes_.push_back(static_cast<char>(n & 0xFF));
    bytes_.push_back(static_cast<char>(n >> 8));
    bytes_.append(payload, 0, n);
    return *this;
  }
  SeedWriter& Msg(uint8_t op, const google::protobuf::MessageLite& m) {
    return Op(op, m.SerializeAsString());
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

v1::ModelSpec SeedSpec(uint32_t k, uint32_t slots, v1::DType serving,
                       bool seeded) {
  v1::ModelSpec spec;
  spec.set_job_id("job");
  v1::TensorSpec* a = spec.add_tensors();
  a->set_name("w");
  a->add_shape(4);
  a->add_shape(64);
  v1::TensorSpec* b = spec.add_tensors();
  b->set_name("b");
  b->add_shape(100);
  b->set_param_group(1);
  *spec.add_param_groups() = DefaultParamGroup(0.01);
  *spec.add_param_groups() = DefaultParamGroup(0.0);
  spec.set_num_servers(k);
  spec.set_alignment(64);
  spec.set_serving_dtype(serving);
  spec.set_contributions_per_step(slots);
  if (seeded) {
    spec.mutable_init()->set_seed(7);
    spec.mutable_init()->set_std(0.02);
  }
  return spec;
}

v1::PushHeader Header(uint64_t step, uint32_t slot, uint64_t offset,
                      uint64_t length, v1::DType dtype, const char* key,
                      uint64_t epoch = 0) {
  v1::PushHeader h;
  h.set_job_id("job");
  h.set_epoch(epoch);
  h.set_step(step);
  h.set_slot(slot);
  h.set_offset(offset);
  h.set_length(length);
  h.set_dtype(dtype);
  h.set_idempotency_key(key);
  return h;
}

// Raw bytes (any bit patterns, NaNs included).
std::string Chunk(uint8_t session, size_t bytes, uint8_t fill) {
  std::string c(1, static_cast<char>(session));
  for (size_t i = 0; i < bytes; ++i) c.push_back(static_cast<char>(fill + i));
  return c;
}

// `n` finite gradient values in `dtype`, little endian.
std::string Grads(uint8_t session, size_t n, v1::DType dtype, float scale) {
  std::string c(1, static_cast<char>(session));
  for (size_t i = 0; i < n; ++i) {
    const float x = scale * (static_cast<float>(i % 17) - 8.0f) / 8.0f;
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    if (dtype == v1::DTYPE_FP32) {
      c.append(reinterpret_cast<const char*>(&bits), 4);
    } else {
      // bf16: the upper half; fp16: 0x3C00 (1.0) scaled by sign, exact.
      const uint16_t h = dtype == v1::DTYPE_BF16
                             ? static_cast<uint16_t>(bits >> 16)
                             : static_cast<uint16_t>((x < 0 ? 0x8000 : 0) |
                                                     (x == 0 ? 0 : 0x3C00));
      c.append(reinterpret_cast<const char*>(&h), 2);
    }
  }
  return c;
}

v1::GatherRequest GatherReq(uint64_t offset, uint64_t length, v1::DType dtype) {
  v1::GatherRequest g;
  g.set_job_id("job");
  g.set_offset(offset);
  g.set_length(length);
  g.set_dtype(dtype);
  return g;
}

v1::PrepareStepRequest PrepareReq(uint64_t step, uint64_t epoch = 0) {
  v1::PrepareStepRequest r;
  r.set_job_id("job");
  r.set_epoch(epoch);
  r.set_step(step);
  return r;
}

v1::CommitStepRequest CommitReq(uint64_t step, bool skip, uint64_t epoch = 0) {
  v1::CommitStepRequest r;
  r.set_job_id("job");
  r.set_epoch(epoch);
  r.set_step(step);
  r.set_clip_coef(1.0f);
  r.set_lr(1e-3);
  r.set_skip(skip);
  return r;
}

v1::WriteHeader WriteReq(uint64_t offset, uint64_t length) {
  v1::WriteHeader w;
  w.set_job_id("job");
  w.set_offset(offset);
  w.set_length(length);
  w.set_dtype(v1::DTYPE_FP32);
  return w;
}

std::vector<std::string> Seeds() {
  std::vector<std::string> seeds;
  // One server, Ψ = 356: a full step in fp32, then one in bf16 chunks
  // (sessions are dropped once finished, so indices restart at 0).
  {
    SeedWriter w(0);
    w.Msg(kRegister, SeedSpec(1, 1, v1::DTYPE_BF16, false))
        .Msg(kWrite, WriteReq(0, 356))
        .Msg(kGather, GatherReq(0, 356, v1::DTYPE_FP32))
        .Msg(kGather, GatherReq(64, 100, v1::DTYPE_BF16))
        .Msg(kGather, GatherReq(1, 3, v1::DTYPE_FP16))
        .Msg(kBeginPush, Header(0, 0, 0, 356, v1::DTYPE_FP32, "k0"))
        .Op(kAddChunk, Grads(0, 256, v1::DTYPE_FP32, 1.0f))
        .Op(kAddChunk, Grads(0, 100, v1::DTYPE_FP32, 0.5f))
        .Op(kFinish, std::string(1, 0))
        .Op(kDrop, std::string(1, 0))
        .Msg(kPrepare, PrepareReq(0))
        .Msg(kCommit, CommitReq(0, false))
        .Msg(kCommit, CommitReq(0, false))  // retried commit
        .Msg(kBeginPush, Header(1, 0, 0, 128, v1::DTYPE_BF16, "k1a"))
        .Msg(kBeginPush, Header(1, 0, 128, 228, v1::DTYPE_BF16, "k1b"))
        .Op(kAddChunk, Grads(0, 128, v1::DTYPE_BF16, 2.0f))
        .Op(kAddChunk, Grads(1, 200, v1::DTYPE_BF16, 1.0f))
        .Op(kAddChunk, Grads(1, 28, v1::DTYPE_BF16, 1.0f))
        .Op(kFinish, std::string(1, 0))
        .Op(kFinish, std::string(1, 1))
        .Op(kDrop, std::string(1, 0))
        .Op(kDrop, std::string(1, 0))
        .Msg(kBeginPush, Header(1, 0, 0, 128, v1::DTYPE_BF16, "k1a"))  // dup
        .Op(kFinish, std::string(1, 0))
        .Msg(kPrepare, PrepareReq(1))
        .Msg(kCommit, CommitReq(1, false))
        .Msg(kGather, GatherReq(0, 356, v1::DTYPE_BF16))
        .Msg(kGather, GatherReq(0, 356, v1::DTYPE_FP32))
        .Op(kStats, "");
    seeds.push_back(w.bytes());
  }
  // Shard 1 of 2 (owns [192, 356)), two slots, seeded init, fp16 serving,
  // fp16 pushes, a dropped unfinished session, NaN gradients committed with
  // skip, a newer epoch aborting a step.
  {
    SeedWriter w(1 | (1 << 2));
    w.Msg(kRegister, SeedSpec(2, 2, v1::DTYPE_FP16, true))
        .Msg(kGather, GatherReq(192, 164, v1::DTYPE_FP16))
        .Msg(kGather, GatherReq(256, 100, v1::DTYPE_BF16))
        .Msg(kBeginPush, Header(0, 0, 192, 164, v1::DTYPE_FP16, "s0"))
        .Op(kAddChunk, Grads(0, 164, v1::DTYPE_FP16, 1.0f))
        .Op(kFinish, std::string(1, 0))
        .Op(kDrop, std::string(1, 0))
        .Msg(kBeginPush, Header(0, 1, 192, 64, v1::DTYPE_FP32, "s1a"))
        .Op(kDrop, std::string(1, 0))  // unfinished: released
        .Msg(kBeginPush, Header(0, 1, 192, 164, v1::DTYPE_FP32, "s1"))
        .Op(kAddChunk, Chunk(0, 656, 0x7f))  // raw bits: NaN/Inf inside
        .Op(kFinish, std::string(1, 0))
        .Op(kDrop, std::string(1, 0))
        .Msg(kPrepare, PrepareReq(0))
        .Msg(kCommit, CommitReq(0, false))  // refused: overflow
        .Msg(kCommit, CommitReq(0, true))
        .Msg(kBeginPush, Header(1, 0, 192, 164, v1::DTYPE_FP32, "e1", 1))
        .Op(kAddChunk, Grads(0, 164, v1::DTYPE_FP32, 0.25f))
        .Op(kFinish, std::string(1, 0))
        .Op(kDrop, std::string(1, 0))
        .Msg(kBeginPush, Header(1, 1, 192, 164, v1::DTYPE_FP32, "e1b", 1))
        .Op(kAddChunk, Grads(0, 164, v1::DTYPE_FP32, 0.5f))
        .Op(kFinish, std::string(1, 0))
        .Op(kDrop, std::string(1, 0))
        .Msg(kPrepare, PrepareReq(1, 1))
        .Msg(kCommit, CommitReq(1, false, 1))
        .Msg(kWrite, WriteReq(256, 100))
        .Op(kStats, "");
    seeds.push_back(w.bytes());
  }
  // Errors: before registration, wrong job, misaligned and overlapping
  // ranges, short and oversized contributions, commit before prepare.
  {
    SeedWriter w(0);
    v1::GatherRequest other = GatherReq(0, 1, v1::DTYPE_FP32);
    other.set_job_id("other");
    w.Msg(kGather, GatherReq(0, 1, v1::DTYPE_FP32))
        .Msg(kRegister, SeedSpec(1, 1, v1::DTYPE_BF16, false))
        .Msg(kRegister, SeedSpec(1, 2, v1::DTYPE_BF16, false))
        .Msg(kGather, other)
        .Msg(kGather, GatherReq(300, 100, v1::DTYPE_FP32))
        .Msg(kBeginPush, Header(0, 0, 10, 64, v1::DTYPE_FP32, "mis"))
        .Msg(kBeginPush, Header(0, 0, 0, 128, v1::DTYPE_FP32, "a"))
        .Msg(kBeginPush, Header(0, 0, 64, 128, v1::DTYPE_FP32, "b"))
        .Op(kAddChunk, Chunk(0, 3, 0))
        .Op(kAddChunk, std::string("\x80\x10\x00\x08\x01", 5))
        .Op(kFinish, std::string(1, 0))
        .Msg(kCommit, CommitReq(0, false))
        .Msg(kPrepare, PrepareReq(5))
        .Msg(kWrite, WriteReq(0, 1000))
        .Op(kStats, "");
    seeds.push_back(w.bytes());
  }
  // Ψ = 210000 (several optimizer tiles): a large pattern chunk.
  {
    v1::ModelSpec spec = SeedSpec(1, 1, v1::DTYPE_BF16, true);
    spec.clear_tensors();
    v1::TensorSpec* t = spec.add_tensors();
    t->set_name("big");
    t->add_shape(3);
    t->add_shape(70000);
    SeedWriter w(0);
    w.Msg(kRegister, spec)
        .Msg(kBeginPush, Header(0, 0, 0, 65536, v1::DTYPE_FP32, "big"))
        .Op(kAddChunk, std::string("\x80\x04\x00\x00\x01", 5))
        .Op(kFinish, std::string(1, 0))
        .Msg(kGather, GatherReq(0, 210000, v1::DTYPE_BF16))
        .Msg(kPrepare, PrepareReq(0));
    seeds.push_back(w.bytes());
  }
  return seeds;
}

}  // namespace
}  // namespace fuzz
}  // namespace zeroshard

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  // Proto3 parsing logs every invalid UTF-8 string it rejects; quiet.
  google::protobuf::SetLogHandler(
      [](google::protobuf::LogLevel, const char*, int, const std::string&) {});
  if (const char* v = std::getenv("ZS_FUZZ_LAX")) {
    zeroshard::fuzz::lax = std::atoi(v);
  }
  if (const char* dir = std::getenv("ZS_FUZZ_WRITE_SEEDS")) {
    const auto seeds = zeroshard::fuzz::Seeds();
    for (size_t i = 0; i < seeds.size(); ++i) {
      const std::string path = std::string(dir) + "/seed-" + std::to_string(i);
      std::ofstream(path, std::ios::binary) << seeds[i];
    }
    std::fprintf(stderr, "store_fuzzer: wrote %zu seeds to %s\n", seeds.size(),
                 dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  zeroshard::fuzz::Runner runner(data[0]);
  size_t i = 1;
  while (i < size) {
    const uint8_t op = data[i];
    size_t n = 0;
    if (i + 1 < size) n = data[i + 1];
    if (i + 2 < size) n |= static_cast<size_t>(data[i + 2]) << 8;
    i = std::min(size, i + 3);
    n = std::min(n, size - i);
    runner.Run(op, data + i, n);
    i += n;
  }
  return 0;
}
