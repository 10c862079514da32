#include "server/store/shard_store.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/dtype.h"
#include "common/model_spec.h"
#include "common/optim/adamw.h"
#include "common/optim/adamw_hyper.h"
#include "common/seeded_random.h"
#include "common/status_macros.h"
#include "server/store/shard_store_internal.h"

namespace zeroshard {
namespace {

constexpr uint64_t kTile = 1 << 16;  // elements per optimizer work item
constexpr size_t kMaxKeyBytes = 256;

// Seeded init depends only on (seed, flat index), never on K or the shard.
float SeededNormal(uint64_t seed, uint64_t index, double std) {
  const uint64_t a = SplitMix64(seed * 0x2545F4914F6CDD1Dull + 2 * index);
  const uint64_t b = SplitMix64(seed * 0x2545F4914F6CDD1Dull + 2 * index + 1);
  return static_cast<float>(BoxMullerNormal(a, b) * std);
}

std::string RangeText(uint64_t begin, uint64_t end) {
  return absl::StrCat("[", begin, ", ", end, ")");
}

// fp64 sum of squares of g[0, n) in element order, and whether any element
// is NaN or Inf.
void SumSquares(const float* g, uint64_t n, double* sum, bool* nonfinite) {
  double acc = 0;
  bool bad = false;
  for (uint64_t e = 0; e < n; ++e) {
    const double x = g[e];
    acc += x * x;
    bad |= !std::isfinite(g[e]);
  }
  *sum = acc;
  *nonfinite = bad;
}

// Converts n pushed elements of wire type `dtype` (fp32, bf16 or fp16;
// others are rejected at BeginPush) to fp32.
void WireToFp32(v1::DType dtype, const void* data, float* out, uint64_t n) {
  switch (dtype) {
    case v1::DTYPE_FP32:
      std::memcpy(out, data, n * 4);
      break;
    case v1::DTYPE_BF16:
      ConvertBf16ToFp32(static_cast<const uint16_t*>(data), out, n);
      break;
    case v1::DTYPE_FP16:
      ConvertFp16ToFp32(static_cast<const uint16_t*>(data), out, n);
      break;
    default:
      break;
  }
}

}  // namespace

// ------------------------------------------------------------- PushSession

PushSession::~PushSession() {
  // The writer waits for its I/O: a new push may claim the range once it
  // is released.
  writer_.reset();
  if (store_ != nullptr && !duplicate_ && !finished_) store_->ReleasePush(this);
}

absl::Status PushSession::AddChunk(const void* data, size_t bytes) {
  if (duplicate_ || finished_) return absl::OkStatus();  // nothing to apply
  const size_t esize = DTypeSize(dtype_);
  if (bytes > kMaxChunkBytes) {
    return store_->Reject(absl::InvalidArgumentError(
        absl::StrCat("chunk of ", bytes, " bytes exceeds the ", kMaxChunkBytes,
                     "-byte limit")));
  }
  if (bytes % esize != 0) {
    return store_->Reject(absl::InvalidArgumentError(
        absl::StrCat("chunk of ", bytes, " bytes is not a whole number of ",
                     v1::DType_Name(dtype_), " elements")));
  }
  const uint64_t n = bytes / esize;
  if (n > length_ - received_) {
    return store_->Reject(absl::InvalidArgumentError(
        absl::StrCat("contribution carries more than the announced ", length_,
                     " elements")));
  }
  if (dst_ == nullptr) {
    ZS_RETURN_IF_ERROR(store_->PushToTier(this, data, n));
  } else {
    WireToFp32(dtype_, data, dst_ + received_, n);
  }
  received_ += n;
  store_->bytes_pushed_.fetch_add(bytes);
  return absl::OkStatus();
}

absl::Status PushSession::Finish() {
  if (duplicate_ || finished_) return absl::OkStatus();
  if (received_ != length_) {
    return store_->Reject(absl::InvalidArgumentError(
        absl::StrCat("contribution ended after ", received_, " of ", length_,
                     " announced elements")));
  }
  if (writer_ != nullptr) ZS_RETURN_IF_ERROR(writer_->Finish());
  store_->FinishPush(this);
  finished_ = true;
  return absl::OkStatus();
}

// -------------------------------------------------------------- ShardStore

ShardStore::ShardStore(StoreOptions options)
    : options_(std::move(options)),
      pool_(std::max(1, options_.threads)),
      incarnation_(
          std::random_device()() * 0x100000001ull ^
          static_cast<uint64_t>(
              std::chrono::steady_clock::now().time_since_epoch().count())) {}

ShardStore::~ShardStore() = default;

absl::Status ShardStore::CheckJob(const std::string& job_id) const {
  if (!registered_) {
    return absl::FailedPreconditionError(
        "no model is registered on this server (call RegisterModel first)");
  }
  if (job_id != spec_.job_id()) {
    return absl::NotFoundError(absl::StrCat("job '", job_id,
                                            "' is not held by this server "
                                            "(it holds '",
                                            spec_.job_id(), "')"));
  }
  return absl::OkStatus();
}

absl::Status ShardStore::CheckNotAwaitingRestore() const {
  if (!awaiting_restore_) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "this server restarted from the checkpoint of step ", restored_step_,
      "; the job must roll back to a checkpoint (Restore) before it goes on"));
}

absl::Status ShardStore::ShuttingDown() {
  return absl::UnavailableError(
      "the server is shutting down (SIGTERM); the step will be redone after "
      "it restarts");
}

std::string ShardStore::job_id() const {
  absl::MutexLock l(&mu_);
  return registered_ ? spec_.job_id() : "";
}

absl::StatusOr<RegisterResult> ShardStore::RegisterModel(
    const v1::ModelSpec& spec) {
  absl::Status valid = ValidateSpec(spec);
  if (!valid.ok()) return Reject(valid);
  absl::MutexLock l(&mu_);
  if (spec.num_servers() != options_.num_shards) {
    return Reject(absl::FailedPreconditionError(
        absl::StrCat("ModelSpec.num_servers is ", spec.num_servers(),
                     " but this server was started as one of ",
                     options_.num_shards, " shards")));
  }
  RegisterResult result;
  if (registered_) {
    const std::string difference = DescribeSpecDifference(spec_, spec);
    if (!difference.empty()) {
      return Reject(absl::FailedPreconditionError(
          absl::StrCat("a different model is already registered (", difference,
                       ", registered vs requested)")));
    }
  } else {
    ZS_ASSIGN_OR_RETURN(PartitionPlan plan, PlanForSpec(spec));
    plan_ = std::make_unique<PartitionPlan>(std::move(plan));
    owned_ = plan_->ServerRange(options_.shard_index);
    slots_ = spec.contributions_per_step();
    serving_dtype_ = spec.serving_dtype();
    const uint64_t n = owned_.size();
    // Work items, split at parameter-group boundaries.
    tiles_.clear();  // a registration whose tier failed may have set them
    for (size_t t : plan_->TensorsIn(owned_)) {
      const TensorInfo& info = plan_->tensors()[t];
      const Range r = Intersect(info.range, owned_);
      for (uint64_t b = r.begin; b < r.end; b += kTile) {
        tiles_.push_back(Tile{b - owned_.begin,
                              std::min(r.end, b + kTile) - owned_.begin,
                              info.desc.param_group});
      }
    }
    const bool tiered = static_cast<bool>(options_.make_tier);
    if (tiered) {
      absl::Status created = CreateTier(spec.init());
      if (!created.ok()) {
        tier_.reset();
        return created;
      }
    }
    auto buf = std::make_unique<Buffers>();
    if (!tiered) {
      buf->master = AllocateAligned<float>(n);
      buf->m = AllocateAligned<float>(n);
      buf->v = AllocateAligned<float>(n);
      buf->serve = AllocateAligned<uint16_t>(n);
    }
    // With a tier and one slot, pushes write the tier's gradient directly;
    // with more, slots 1.. go to files when there is a directory for them.
    const bool slot_files =
        tiered && slots_ > 1 && !options_.grad_slot_dir.empty();
    if (slot_files) {
      absl::StatusOr<std::unique_ptr<storage::SlotFiles>> files =
          storage::SlotFiles::Create(
              options_.env != nullptr ? options_.env : storage::DefaultEnv(),
              options_.grad_slot_dir, slots_, n);
      if (!files.ok()) {
        tier_.reset();
        return files.status();
      }
      slot_files_ = *std::move(files);
    }
    const uint32_t ram_slots =
        tiered && (slots_ == 1 || slot_files) ? 0 : slots_;
    for (uint32_t s = 0; s < ram_slots; ++s) {
      buf->grads.push_back(AllocateAligned<float>(n));
    }
    buf->bytes =
        n * ((tiered ? 0 : 4 * 3 + 2) + 4 * static_cast<uint64_t>(ram_slots));
    // First touch in parallel: zero moments and gradients, initialise p.
    const uint64_t base = owned_.begin;
    const v1::SeededInit init = spec.init();
    Buffers* b = buf.get();
    pool_.ParallelFor(tiles_.size(), [&](size_t i) {
      const Tile& t = tiles_[i];
      const size_t len = t.end - t.begin;
      for (auto& g : b->grads) std::memset(g.get() + t.begin, 0, len * 4);
      if (tiered) return;  // the tier holds p, m, v (init in CreateTier)
      std::memset(b->m.get() + t.begin, 0, len * 4);
      std::memset(b->v.get() + t.begin, 0, len * 4);
      float* p = b->master.get();
      if (init.std() > 0) {
        for (uint64_t e = t.begin; e < t.end; ++e) {
          p[e] = SeededNormal(init.seed(), base + e, init.std());
        }
      } else {
        std::memset(p + t.begin, 0, len * 4);
      }
    });
    buf_ = std::move(buf);
    if (!tiered) {
      absl::MutexLock d(&data_mu_);
      RefreshServing(0, n);
    }
    spec_ = spec;
    registered_ = true;
    reserved_.assign(slots_, RangeSet());
    received_.assign(slots_, RangeSet());
    received_elements_.assign(slots_, 0);
    result.created = true;
  }
  result.total = plan_->total();
  result.owned = owned_;
  for (uint32_t s = 0; s < plan_->num_servers(); ++s) {
    result.ranges.push_back(plan_->ServerRange(s));
  }
  result.plan_hash = plan_->Hash();
  result.step = step_;
  return result;
}

absl::Status ShardStore::CreateTier(const v1::SeededInit& init) {
  storage::TierLayout layout;
  layout.size = owned_.size();
  layout.serving = serving_dtype_ == v1::DTYPE_BF16 ? ServingType::kBf16
                                                    : ServingType::kFp16;
  for (const Tile& t : tiles_) {  // merge adjacent tiles of one group
    if (!layout.groups.empty() && layout.groups.back().end == t.begin &&
        layout.groups.back().group == t.group) {
      layout.groups.back().end = t.end;
    } else {
      layout.groups.push_back(storage::GroupSpan{t.begin, t.end, t.group});
    }
  }
  auto tier = options_.make_tier(layout, &pool_);
  if (!tier.ok()) return tier.status();
  tier_ = std::move(*tier);
  if (init.std() > 0) {  // a new tier holds p = 0 otherwise
    std::vector<float> chunk(kTile);
    for (const Tile& t : tiles_) {
      for (uint64_t e = t.begin; e < t.end; ++e) {
        chunk[e - t.begin] =
            SeededNormal(init.seed(), owned_.begin + e, init.std());
      }
      ZS_RETURN_IF_ERROR(
          tier_->WriteMaster(t.begin, chunk.data(), t.end - t.begin));
    }
  }
  return tier_->Flush();
}

absl::Status ShardStore::PushToTier(PushSession* session, const void* data,
                                    uint64_t n) {
  const float* fp32 = static_cast<const float*>(data);
  if (session->dtype_ != v1::DTYPE_FP32) {
    session->converted_.resize(n);
    WireToFp32(session->dtype_, data, session->converted_.data(), n);
    fp32 = session->converted_.data();
  }
  const uint64_t rel = session->range_.begin - owned_.begin;
  if (session->slot_ > 0) {
    return slot_files_->Write(session->slot_, rel + session->received_, fp32,
                              n);
  }
  if (session->writer_ == nullptr) {
    ZS_ASSIGN_OR_RETURN(session->writer_,
                        tier_->NewGradWriter(rel, session->length_));
  }
  return session->writer_->Append(fp32, n);
}

void ShardStore::RefreshServing(uint64_t begin, uint64_t end) {
  const float* p = buf_->master.get();
  uint16_t* out = buf_->serve.get();
  const bool bf16 = serving_dtype_ == v1::DTYPE_BF16;
  for (uint64_t b = begin; b < end; b += kTile) {
    const uint64_t n = std::min(end, b + kTile) - b;
    if (bf16) {
      ConvertFp32ToBf16(p + b, out + b, n);
    } else {
      ConvertFp32ToFp16(p + b, out + b, n);
    }
  }
}

absl::Status ShardStore::CheckWrite(const v1::WriteHeader& h) {
  absl::MutexLock l(&mu_);
  absl::Status s = CheckJob(h.job_id());
  if (!s.ok()) return Reject(s);
  if (h.dtype() != v1::DTYPE_FP32) {
    return Reject(absl::InvalidArgumentError(
        "WriteParameters takes DTYPE_FP32 data only"));
  }
  s = CheckOwnedRange(h.offset(), h.length());
  if (!s.ok()) return Reject(s);
  if (in_flight_ > 0 || committing_ || prepared_ ||
      std::any_of(received_elements_.begin(), received_elements_.end(),
                  [](uint64_t n) { return n > 0; })) {
    return Reject(absl::FailedPreconditionError(
        "gradients for the current step are pending; write parameters "
        "between steps"));
  }
  return absl::OkStatus();
}

absl::Status ShardStore::WriteParameters(const std::string& job_id,
                                         uint64_t offset, const float* data,
                                         uint64_t n) {
  v1::WriteHeader h;
  h.set_job_id(job_id);
  h.set_offset(offset);
  h.set_length(n);
  h.set_dtype(v1::DTYPE_FP32);
  ZS_RETURN_IF_ERROR(CheckWrite(h));
  absl::MutexLock d(&data_mu_);
  const uint64_t rel = offset - owned_.begin;
  if (tier_ != nullptr) return tier_->WriteMaster(rel, data, n);
  std::memcpy(buf_->master.get() + rel, data, n * 4);
  RefreshServing(rel, rel + n);
  return absl::OkStatus();
}

absl::Status ShardStore::CheckGather(const v1::GatherRequest& r) {
  absl::MutexLock l(&mu_);
  absl::Status s = CheckJob(r.job_id());
  if (!s.ok()) return Reject(s);
  if (DTypeSize(r.dtype()) == 0) {
    return Reject(absl::InvalidArgumentError(
        absl::StrCat("unknown dtype ", static_cast<int>(r.dtype()))));
  }
  s = CheckOwnedRange(r.offset(), r.length());
  if (!s.ok()) return Reject(s);
  return absl::OkStatus();
}

absl::Status ShardStore::GatherInto(uint64_t offset, uint64_t n,
                                    v1::DType dtype, void* out,
                                    uint64_t* step) {
  absl::ReaderMutexLock d(&data_mu_);
  const uint64_t rel = offset - owned_.begin;
  const v1::DType serving = serving_dtype_;
  if (tier_ != nullptr) {
    absl::Status s;
    if (dtype == v1::DTYPE_FP32) {
      s = tier_->ReadMaster(rel, n, static_cast<float*>(out));
    } else if (dtype == serving) {
      s = tier_->ReadServing(rel, n, static_cast<uint16_t*>(out), nullptr);
    } else {
      std::vector<float> master(n);
      s = tier_->ReadMaster(rel, n, master.data());
      if (dtype == v1::DTYPE_BF16) {
        ConvertFp32ToBf16(master.data(), static_cast<uint16_t*>(out), n);
      } else {
        ConvertFp32ToFp16(master.data(), static_cast<uint16_t*>(out), n);
      }
    }
    if (!s.ok()) return s;
  } else if (dtype == v1::DTYPE_FP32) {
    std::memcpy(out, buf_->master.get() + rel, n * 4);
  } else if (dtype == serving) {
    std::memcpy(out, buf_->serve.get() + rel, n * 2);
  } else if (dtype == v1::DTYPE_BF16) {
    ConvertFp32ToBf16(buf_->master.get() + rel, static_cast<uint16_t*>(out), n);
  } else {
    ConvertFp32ToFp16(buf_->master.get() + rel, static_cast<uint16_t*>(out), n);
  }
  *step = data_step_;
  bytes_gathered_.fetch_add(n * DTypeSize(dtype));
  return absl::OkStatus();
}

absl::Status ShardStore::CheckOwnedRange(uint64_t offset,
                                         uint64_t length) const {
  if (length == 0 || offset < owned_.begin || offset > owned_.end ||
      length > owned_.end - offset) {
    return absl::InvalidArgumentError(
        absl::StrCat("range ", RangeText(offset, offset + length),
                     " is empty or outside the owned range ",
                     RangeText(owned_.begin, owned_.end)));
  }
  return absl::OkStatus();
}

void ShardStore::ResetStepLocked() {
  for (auto& s : reserved_) s.clear();
  for (auto& s : received_) s.clear();
  std::fill(received_elements_.begin(), received_elements_.end(), 0);
  keys_.clear();
  committed_keys_.clear();
  prepared_ = false;
  prepared_result_ = PrepareResult();
}

absl::StatusOr<std::unique_ptr<PushSession>> ShardStore::BeginPush(
    const v1::PushHeader& h) {
  absl::MutexLock l(&mu_);
  absl::Status s = CheckJob(h.job_id());
  if (s.ok()) s = CheckNotAwaitingRestore();
  if (s.ok() && draining_) s = ShuttingDown();
  if (!s.ok()) return Reject(s);
  if (DTypeSize(h.dtype()) == 0) {
    return Reject(absl::InvalidArgumentError(
        absl::StrCat("unknown dtype ", static_cast<int>(h.dtype()))));
  }
  if (h.slot() >= slots_) {
    return Reject(absl::InvalidArgumentError(absl::StrCat(
        "slot ", h.slot(), " is not below contributions_per_step ", slots_)));
  }
  if (h.idempotency_key().empty() ||
      h.idempotency_key().size() > kMaxKeyBytes) {
    return Reject(absl::InvalidArgumentError(
        absl::StrCat("idempotency_key must be 1 to ", kMaxKeyBytes, " bytes")));
  }
  const uint64_t begin = h.offset();
  s = CheckOwnedRange(begin, h.length());
  if (!s.ok()) return Reject(s);
  const uint64_t end = begin + h.length();
  const uint32_t align = spec_.alignment();
  if (begin % align != 0 || (end % align != 0 && end != owned_.end)) {
    return Reject(absl::InvalidArgumentError(
        absl::StrCat("range ", RangeText(begin, end), " is not aligned to ",
                     align, " elements")));
  }
  if (h.epoch() < epoch_) {
    return Reject(absl::FailedPreconditionError(absl::StrCat(
        "stale epoch ", h.epoch(), " (the server is at epoch ", epoch_, ")")));
  }
  // A repeated key is acknowledged and ignored, also when it belongs to the
  // step just committed (the client retried a push whose answer was lost).
  auto duplicate = [&] {
    ++duplicates_ignored_;
    auto session = std::unique_ptr<PushSession>(new PushSession());
    session->store_ = this;
    session->duplicate_ = true;
    session->length_ = h.length();
    return session;
  };
  if (h.epoch() == epoch_ && h.step() + 1 == step_) {
    auto done = committed_keys_.find(h.idempotency_key());
    if (done != committed_keys_.end() && done->second.done &&
        done->second.slot == h.slot() &&
        done->second.range == Range{begin, end}) {
      return duplicate();
    }
  }
  if (h.step() != step_) {
    return Reject(absl::FailedPreconditionError(absl::StrCat(
        h.step() < step_ ? "stale" : "future", " step ", h.step(),
        " (the server expects contributions for step ", step_, ")")));
  }
  if (committing_) {
    return Reject(absl::AbortedError("a commit is in progress; retry"));
  }
  auto key = keys_.find(h.idempotency_key());
  const bool same_epoch = h.epoch() == epoch_;
  if (same_epoch && key != keys_.end()) {
    const Contribution& c = key->second;
    if (c.slot != h.slot() || !(c.range == Range{begin, end})) {
      return Reject(absl::InvalidArgumentError(
          absl::StrCat("idempotency key '", h.idempotency_key(),
                       "' was used for a different contribution (slot ", c.slot,
                       ", ", RangeText(c.range.begin, c.range.end), ")")));
    }
    if (!c.done) {
      return Reject(absl::AbortedError(
          "the same contribution is still being received; retry"));
    }
    return duplicate();
  }
  if (!same_epoch) {
    // A newer epoch: the unfinished step is aborted. Refuse (retryably)
    // while older-epoch streams are still writing their ranges.
    if (in_flight_ > 0) {
      return Reject(absl::AbortedError(
          "contributions of an older epoch are still in flight; retry"));
    }
    ResetStepLocked();
    epoch_ = h.epoch();
  }
  RangeSet& reserved = reserved_[h.slot()];
  auto next = reserved.lower_bound(begin);
  auto overlaps = [&](RangeSet::const_iterator it) {
    return it != reserved.end() && it->first < end && begin < it->second;
  };
  if (overlaps(next) ||
      (next != reserved.begin() && overlaps(std::prev(next)))) {
    return Reject(absl::FailedPreconditionError(absl::StrCat(
        "range ", RangeText(begin, end), " of slot ", h.slot(),
        " overlaps a contribution already received for step ", step_)));
  }
  reserved.emplace(begin, end);
  keys_.emplace(h.idempotency_key(),
                Contribution{h.slot(), Range{begin, end}, false});
  ++in_flight_;
  auto session = std::unique_ptr<PushSession>(new PushSession());
  session->store_ = this;
  session->slot_ = h.slot();
  session->range_ = Range{begin, end};
  session->length_ = h.length();
  session->dtype_ = h.dtype();
  session->key_ = h.idempotency_key();
  session->dst_ = buf_->grads.empty()
                      ? nullptr
                      : buf_->grads[h.slot()].get() + (begin - owned_.begin);
  return session;
}

void ShardStore::FinishPush(PushSession* session) {
  absl::MutexLock l(&mu_);
  received_[session->slot_].emplace(session->range_.begin, session->range_.end);
  received_elements_[session->slot_] += session->range_.size();
  keys_[session->key_].done = true;
  ++contributions_applied_;
  elements_applied_ += session->range_.size();
  --in_flight_;
}

void ShardStore::ReleasePush(PushSession* session) {
  absl::MutexLock l(&mu_);
  reserved_[session->slot_].erase(session->range_.begin);
  keys_.erase(session->key_);
  --in_flight_;
}

absl::Status ShardStore::ReduceSlotsLocked(PrepareResult* result) {
  Buffers* b = buf_.get();
  const uint32_t slots = slots_;
  std::vector<double> partial(tiles_.size(), 0.0);
  std::vector<char> bad(tiles_.size(), 0);
  std::vector<absl::Status> errors(b->grads.empty() ? tiles_.size() : 0);
  pool_.ParallelFor(tiles_.size(), [&](size_t i) {
    const Tile& t = tiles_[i];
    bool nonfinite = false;
    if (b->grads.empty()) {  // pushed into the tier (and the slot files)
      const uint64_t len = t.end - t.begin;
      std::vector<float> g(len), gs(slots > 1 ? len : 0);
      absl::Status& err = errors[i];
      if (slots == 1) {
        err = tier_->ReadGrad(t.begin, len, g.data());
      } else {
        // Tiles share the tier's checksummed chunks at their ends: a read
        // must not see another tile's write half done.
        absl::MutexLock lock(&grad_mu_);
        err = tier_->ReadGrad(t.begin, len, g.data());
      }
      // The same order as in RAM below: bit-identical sums.
      for (uint32_t s = 1; s < slots && err.ok(); ++s) {
        err = slot_files_->Read(s, t.begin, len, gs.data());
        for (uint64_t e = 0; e < len && err.ok(); ++e) g[e] += gs[e];
      }
      if (err.ok() && slots > 1) {
        absl::MutexLock lock(&grad_mu_);
        err = tier_->WriteGrad(t.begin, g.data(), len);
      }
      SumSquares(g.data(), len, &partial[i], &nonfinite);
      bad[i] = nonfinite;
      return;
    }
    float* g0 = b->grads[0].get();
    // Slots are summed in slot order so the result never depends on the
    // order in which contributions arrived.
    for (uint32_t s = 1; s < slots; ++s) {
      const float* gs = b->grads[s].get();
      for (uint64_t e = t.begin; e < t.end; ++e) g0[e] += gs[e];
    }
    SumSquares(g0 + t.begin, t.end - t.begin, &partial[i], &nonfinite);
    bad[i] = nonfinite;
  });
  for (const absl::Status& s : errors) ZS_RETURN_IF_ERROR(s);
  if (tier_ != nullptr && !b->grads.empty()) {
    absl::MutexLock g(&grad_mu_);
    ZS_RETURN_IF_ERROR(tier_->WriteGrad(0, b->grads[0].get(), owned_.size()));
  }
  double total = 0;
  bool overflow = false;
  for (size_t i = 0; i < tiles_.size(); ++i) {  // fixed order: deterministic
    total += partial[i];
    overflow |= bad[i] != 0;
  }
  result->sum_squares = total;
  result->overflow = overflow;
  return absl::OkStatus();
}

absl::StatusOr<PrepareResult> ShardStore::Prepare(const std::string& job_id,
                                                  uint64_t epoch,
                                                  uint64_t step) {
  absl::MutexLock l(&mu_);
  absl::Status s = CheckJob(job_id);
  if (s.ok()) s = CheckNotAwaitingRestore();
  if (!s.ok()) return Reject(s);
  if (epoch != epoch_) {
    return Reject(absl::FailedPreconditionError(absl::StrCat(
        "epoch ", epoch, " does not match the server's epoch ", epoch_)));
  }
  if (step != step_) {
    return Reject(absl::FailedPreconditionError(
        absl::StrCat("cannot prepare step ", step, ": the server is at step ",
                     step_, step < step_ ? " (already committed)" : "")));
  }
  if (prepared_) return prepared_result_;
  if (draining_) return Reject(ShuttingDown());
  PrepareResult r;
  r.expected_elements = owned_.size() * slots_;
  for (uint64_t n : received_elements_) r.received_elements += n;
  r.complete = r.received_elements == r.expected_elements && in_flight_ == 0;
  if (!r.complete) return r;
  ZS_RETURN_IF_ERROR(ReduceSlotsLocked(&r));
  prepared_ = true;
  prepared_result_ = r;
  return r;
}

absl::StatusOr<CommitResult> ShardStore::Commit(
    const v1::CommitStepRequest& req) {
  std::vector<AdamWHyper> hypers;
  uint64_t step;
  {
    absl::MutexLock l(&mu_);
    absl::Status s = CheckJob(req.job_id());
    if (s.ok()) s = CheckNotAwaitingRestore();
    if (!s.ok()) return Reject(s);
    if (last_commit_valid_ && req.step() + 1 == step_ &&
        req.epoch() == last_commit_epoch_) {
      CommitResult again = last_commit_;
      again.already_committed = true;
      return again;
    }
    if (req.epoch() != epoch_) {
      return Reject(absl::FailedPreconditionError(
          absl::StrCat("epoch ", req.epoch(),
                       " does not match the server's epoch ", epoch_)));
    }
    if (req.step() != step_) {
      return Reject(absl::FailedPreconditionError(
          absl::StrCat("cannot commit step ", req.step(),
                       ": the server is at step ", step_)));
    }
    if (committing_) {
      return Reject(absl::AbortedError("a commit is in progress; retry"));
    }
    if (!prepared_) {
      return Reject(absl::FailedPreconditionError(absl::StrCat(
          "step ", step_, " has not been prepared (commit before prepare)")));
    }
    if (!req.skip()) {
      if (!(std::isfinite(req.clip_coef()) && req.clip_coef() > 0)) {
        return Reject(absl::InvalidArgumentError(absl::StrCat(
            "clip_coef ", req.clip_coef(), " must be finite and > 0")));
      }
      if (!(std::isfinite(req.lr()) && req.lr() >= 0)) {
        return Reject(absl::InvalidArgumentError(
            absl::StrCat("lr ", req.lr(), " must be finite and >= 0")));
      }
      if (prepared_result_.overflow) {
        return Reject(absl::FailedPreconditionError(absl::StrCat(
            "step ", step_,
            " has NaN/Inf gradients; it can only be committed with skip")));
      }
    }
    committing_ = true;
    step = step_;
    for (const v1::ParamGroup& g : spec_.param_groups()) {
      hypers.push_back(
          GroupAdamWHyper(g, req.lr(), req.clip_coef(),
                          static_cast<int64_t>(optimizer_steps_ + 1)));
    }
  }
  const auto start = std::chrono::steady_clock::now();
  absl::Status stepped;
  {
    absl::MutexLock d(&data_mu_);
    if (!req.skip() && tier_ != nullptr) {
      // The tier wants one set per group index up to the last it holds.
      hypers.resize(tier_->layout().num_groups());
      stepped = tier_->Step(hypers);  // a failed step changes nothing
    } else if (!req.skip()) {
      Buffers* b = buf_.get();
      const ServingType st = serving_dtype_ == v1::DTYPE_BF16
                                 ? ServingType::kBf16
                                 : ServingType::kFp16;
      pool_.ParallelFor(tiles_.size(), [&](size_t i) {
        const Tile& t = tiles_[i];
        AdamWStep(hypers[t.group], b->master.get() + t.begin,
                  b->grads[0].get() + t.begin, b->m.get() + t.begin,
                  b->v.get() + t.begin, b->serve.get() + t.begin, st,
                  t.end - t.begin);
      });
    }
    if (stepped.ok()) data_step_ = step + 1;
  }
  if (!stepped.ok()) {
    absl::MutexLock l(&mu_);
    committing_ = false;  // the leader may retry the commit
    return stepped;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  absl::MutexLock l(&mu_);
  CommitResult r;
  r.applied = !req.skip();
  r.step = step + 1;
  step_ = step + 1;
  if (r.applied) ++optimizer_steps_;
  std::map<std::string, Contribution> keys = std::move(keys_);
  LedgerEntry entry{step, epoch_, 0, req.skip()};
  for (const auto& kv : keys) entry.contributions += kv.second.done ? 1 : 0;
  if (ledger_.empty()) ledger_first_step_ = step;
  ledger_.push_back(entry);
  if (ledger_.size() > kMaxLedgerEntries) {
    ledger_.pop_front();
    ledger_first_step_ = ledger_.front().step;
  }
  ResetStepLocked();
  committed_keys_ = std::move(keys);  // for retries of this step's pushes
  if (req.has_trainer_state()) trainer_state_ = req.trainer_state();
  committing_ = false;
  last_commit_valid_ = true;
  last_commit_ = r;
  last_commit_epoch_ = epoch_;
  last_step_seconds_ = seconds;
  return r;
}

void ShardStore::SpecInto(v1::ModelSpec* spec) const {
  absl::MutexLock l(&mu_);
  if (registered_) *spec = spec_;
}

StoreStats ShardStore::Stats(bool with_ledger) const {
  absl::MutexLock l(&mu_);
  StoreStats s;
  s.step = step_;
  s.optimizer_steps = optimizer_steps_;
  s.epoch = epoch_;
  s.owned = owned_;
  s.bytes_held = buf_ ? buf_->bytes : 0;
  s.contributions_applied = contributions_applied_;
  s.duplicates_ignored = duplicates_ignored_;
  s.elements_applied = elements_applied_;
  s.requests_rejected = rejected_.load();
  s.bytes_pushed = bytes_pushed_.load();
  s.bytes_gathered = bytes_gathered_.load();
  s.last_step_seconds = last_step_seconds_;
  s.storage = options_.storage_name;
  s.incarnation = incarnation_;
  s.checkpoint_steps = checkpoint_steps_;
  s.restored_step = restored_step_;
  s.checkpoints_written = checkpoints_written_;
  s.trainer_state = trainer_state_;
  s.awaiting_restore = awaiting_restore_;
  s.ledger_first_step = ledger_first_step_;
  if (with_ledger) s.ledger.assign(ledger_.begin(), ledger_.end());
  if (tier_ != nullptr) {
    const storage::TierStats t = tier_->Stats();
    s.bytes_held += t.bytes_allocated;
    s.storage_bytes_read = t.bytes_read;
    s.storage_bytes_written = t.bytes_written;
    if (slot_files_ != nullptr) {
      s.storage_bytes_read += slot_files_->bytes_read();
      s.storage_bytes_written += slot_files_->bytes_written();
    }
    s.last_step_io_wait_seconds = t.last_step_io_wait_seconds;
    s.last_step_io_bytes_per_second = t.last_step_bandwidth_bytes_per_s;
  }
  return s;
}

}  // namespace zeroshard
