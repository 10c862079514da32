#include "server/store/shard_state.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/model_spec.h"
#include "common/optim/clip.h"
#include "common/seeded_random.h"
#include "common/status_macros.h"
#include "server/storage/ram_tier.h"

namespace zeroshard {
namespace {

constexpr uint64_t kTile = 1 << 16;  // elements per work item

// Seeded init depends only on (seed, flat index), never on K or the shard.
float SeededNormal(uint64_t seed, uint64_t index, double std) {
  const uint64_t a = SplitMix64(seed * 0x2545F4914F6CDD1Dull + 2 * index);
  const uint64_t b = SplitMix64(seed * 0x2545F4914F6CDD1Dull + 2 * index + 1);
  return static_cast<float>(BoxMullerNormal(a, b) * std);
}

// fp64 sum of squares of g[0, n) in SquareSum's eight lanes (clip.h: the
// same bits on every machine, eight add chains instead of one; this was
// the server's largest cost of a step after AdamW), and whether any element
// is NaN or Inf, which makes the sum NaN or Inf.
void SumSquares(const float* g, uint64_t n, double* sum, bool* nonfinite) {
  SquareSum s;
  s.Add(g, n);
  *sum = s.Total();
  *nonfinite = !std::isfinite(*sum);
}

ServingType ServingOf(v1::DType dtype) {
  return dtype == v1::DTYPE_BF16 ? ServingType::kBf16 : ServingType::kFp16;
}

}  // namespace

ShardState::ShardState(PartitionPlan plan, uint32_t shard,
                       const v1::ModelSpec& spec, ThreadPool* pool)
    : spec_(spec),
      plan_(std::move(plan)),
      owned_(plan_.ServerRange(shard)),
      slots_(spec.contributions_per_step()),
      serving_(spec.serving_dtype()),
      pool_(pool) {
  // Work items, split at parameter-group boundaries.
  for (size_t t : plan_.TensorsIn(owned_)) {
    const TensorInfo& info = plan_.tensors()[t];
    const Range r = Intersect(info.range, owned_);
    for (uint64_t b = r.begin; b < r.end; b += kTile) {
      tiles_.push_back(Tile{b - owned_.begin,
                            std::min(r.end, b + kTile) - owned_.begin,
                            info.desc.param_group});
    }
  }
}

absl::StatusOr<std::unique_ptr<ShardState>> ShardState::Create(
    const v1::ModelSpec& spec, uint32_t shard, const Options& options) {
  ZS_ASSIGN_OR_RETURN(PartitionPlan plan, PlanForSpec(spec));
  std::unique_ptr<ShardState> state(
      new ShardState(std::move(plan), shard, spec, options.pool));
  storage::TierLayout layout;
  layout.size = state->size();
  layout.serving = ServingOf(spec.serving_dtype());
  for (const Tile& t : state->tiles_) {  // adjacent tiles of one group merge
    if (!layout.groups.empty() && layout.groups.back().end == t.begin &&
        layout.groups.back().group == t.group) {
      layout.groups.back().end = t.end;
    } else {
      layout.groups.push_back(storage::GroupSpan{t.begin, t.end, t.group});
    }
  }
  if (options.make_tier) {
    ZS_ASSIGN_OR_RETURN(state->tier_, options.make_tier(layout, options.pool));
  } else {
    ZS_ASSIGN_OR_RETURN(state->tier_,
                        storage::RamTier::Create(layout, options.pool));
  }
  const uint32_t slots = state->slots_;
  if (slots > 1 && !options.slot_dir.empty()) {
    Env* env = options.env != nullptr ? options.env : DefaultEnv();
    ZS_ASSIGN_OR_RETURN(state->grad_slots_,
                        storage::SlotFiles::Create(env, options.slot_dir, slots,
                                                   state->size()));
  } else if (slots > 1) {
    ZS_ASSIGN_OR_RETURN(state->grad_slots_,
                        storage::NewRamGradSlots(slots, state->size()));
  }
  ZS_RETURN_IF_ERROR(state->Init(spec.init()));
  return state;
}

RegisterResult ShardState::Registration(bool created, uint64_t step) const {
  RegisterResult r;
  r.created = created;
  r.total = plan_.total();
  r.owned = owned_;
  for (uint32_t s = 0; s < plan_.num_servers(); ++s) {
    r.ranges.push_back(plan_.ServerRange(s));
  }
  r.plan_hash = plan_.Hash();
  r.step = step;
  return r;
}

absl::Status ShardState::Init(const v1::SeededInit& init) {
  // A new tier holds p = 0; a seed draws p, batch by batch of tiles: the
  // values in parallel, then the tier's writes in order (never inside the
  // pool's loop, which the tier's own step runs under its lock).
  constexpr size_t kBatch = 64;
  for (size_t first = 0; init.std() > 0 && first < tiles_.size();
       first += kBatch) {
    const size_t count = std::min(kBatch, tiles_.size() - first);
    std::vector<std::vector<float>> values(count);
    pool_->ParallelFor(count, [&](size_t i) {
      const Tile& t = tiles_[first + i];
      values[i].resize(t.end - t.begin);
      for (uint64_t e = t.begin; e < t.end; ++e) {
        values[i][e - t.begin] =
            SeededNormal(init.seed(), owned_.begin + e, init.std());
      }
    });
    for (size_t i = 0; i < count; ++i) {
      ZS_RETURN_IF_ERROR(tier_->WriteMaster(
          tiles_[first + i].begin, values[i].data(), values[i].size()));
    }
  }
  return tier_->Flush();
}

absl::StatusOr<std::unique_ptr<storage::GradWriter>> ShardState::NewGradWriter(
    uint32_t slot, uint64_t offset, uint64_t n) {
  if (slot == 0) return tier_->NewGradWriter(offset, n);
  return storage::NewSlotWriter(grad_slots_.get(), slot, offset, n);
}

absl::Status ShardState::Reduce(double* sum_squares, bool* overflow) {
  std::vector<double> partial(tiles_.size(), 0.0);
  std::vector<char> bad(tiles_.size(), 0);
  std::vector<absl::Status> errors(tiles_.size());
  pool_->ParallelFor(tiles_.size(), [&](size_t i) {
    const Tile& t = tiles_[i];
    const uint64_t len = t.end - t.begin;
    errors[i] = tier_->VisitGrad(t.begin, len, slots_ > 1, [&](float* g) {
      // Slot order, whatever order the contributions arrived in.
      for (uint32_t s = 1; s < slots_; ++s) {
        ZS_RETURN_IF_ERROR(grad_slots_->AddInto(s, t.begin, len, g));
      }
      bool nonfinite = false;
      SumSquares(g, len, &partial[i], &nonfinite);
      bad[i] = nonfinite;
      return absl::OkStatus();
    });
  });
  for (const absl::Status& s : errors) ZS_RETURN_IF_ERROR(s);
  double total = 0;
  bool any = false;
  for (size_t i = 0; i < tiles_.size(); ++i) {  // fixed order: deterministic
    total += partial[i];
    any |= bad[i] != 0;
  }
  *sum_squares = total;
  *overflow = any;
  return absl::OkStatus();
}

absl::Status ShardState::Step(std::optional<std::vector<AdamWHyper>> hypers,
                              uint64_t step) {
  absl::MutexLock l(&mu_);
  if (hypers.has_value()) {
    // The tier wants one set per group index up to the last it holds.
    hypers->resize(tier_->layout().num_groups());
    ZS_RETURN_IF_ERROR(tier_->Step(*hypers));
  }
  step_ = step;
  return absl::OkStatus();
}

absl::Status ShardState::Gather(uint64_t offset, uint64_t n, v1::DType dtype,
                                void* out, uint64_t* step) {
  absl::ReaderMutexLock l(&mu_);
  *step = step_;
  if (dtype == v1::DTYPE_FP32) {
    return tier_->ReadMaster(offset, n, static_cast<float*>(out));
  }
  if (dtype == serving_) {
    return tier_->ReadServing(offset, n, static_cast<uint16_t*>(out), nullptr);
  }
  std::vector<float> master(n);
  ZS_RETURN_IF_ERROR(tier_->ReadMaster(offset, n, master.data()));
  if (dtype == v1::DTYPE_BF16) {
    ConvertFp32ToBf16(master.data(), static_cast<uint16_t*>(out), n);
  } else {
    ConvertFp32ToFp16(master.data(), static_cast<uint16_t*>(out), n);
  }
  return absl::OkStatus();
}

absl::Status ShardState::WriteMaster(uint64_t offset, const float* data,
                                     uint64_t n) {
  absl::MutexLock l(&mu_);
  return tier_->WriteMaster(offset, data, n);
}

absl::Status ShardState::ReadCommitted(
    uint64_t step,
    const std::function<absl::Status(const checkpoint::ArraySource&)>& fn) {
  absl::ReaderMutexLock l(&mu_);
  if (step_ != step) {
    return absl::AbortedError(absl::StrCat(
        "step ", step_, " was committed meanwhile; retry the checkpoint"));
  }
  return fn([this](int a, uint64_t offset, uint64_t n, float* out)
                ABSL_NO_THREAD_SAFETY_ANALYSIS {
                  return ReadArray(a, offset, n, out);
                });
}

absl::Status ShardState::ReadArray(int array, uint64_t offset, uint64_t n,
                                   float* out) {
  if (array == 0) return tier_->ReadMaster(offset, n, out);
  std::vector<float> other(n);
  return array == 1 ? tier_->ReadMoments(offset, n, out, other.data())
                    : tier_->ReadMoments(offset, n, other.data(), out);
}

absl::Status ShardState::Load(const float* p, const float* m, const float* v,
                              uint64_t step) {
  absl::MutexLock l(&mu_);
  // On a tier with files a failure here leaves it marked as interrupted
  // (it refuses to open); the checkpoint itself is intact.
  ZS_RETURN_IF_ERROR(tier_->WriteMaster(0, p, size()));
  ZS_RETURN_IF_ERROR(tier_->WriteMoments(0, m, v, size()));
  ZS_RETURN_IF_ERROR(tier_->Flush());
  step_ = step;
  return absl::OkStatus();
}

void ShardState::FillStats(StoreStats* s) const {
  const storage::TierStats t = tier_->Stats();
  s->owned = owned_;
  s->bytes_held = t.bytes_allocated;
  s->storage_bytes_read = t.bytes_read;
  s->storage_bytes_written = t.bytes_written;
  if (grad_slots_ != nullptr) {
    s->bytes_held += grad_slots_->bytes_held();
    s->storage_bytes_read += grad_slots_->bytes_read();
    s->storage_bytes_written += grad_slots_->bytes_written();
  }
  s->last_step_io_wait_seconds = t.last_step_io_wait_seconds;
  s->last_step_io_bytes_per_second = t.last_step_bandwidth_bytes_per_s;
}

}  // namespace zeroshard
