#include "server/store/shard_store.h"

#include <chrono>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/model_spec.h"
#include "common/optim/adamw_hyper.h"
#include "common/status_macros.h"
#include "server/storage/buffer.h"

namespace zeroshard {
namespace {

uint64_t NewIncarnation() {
  return std::random_device()() * 0x100000001ull ^
         static_cast<uint64_t>(
             std::chrono::steady_clock::now().time_since_epoch().count());
}

}  // namespace

ShardStore::ShardStore(StoreOptions options)
    : options_(std::move(options)),
      pool_(std::max(1, options_.threads)),
      checkpointer_(options_.env, options_.checkpoint_dir, options_.shard_index,
                    options_.num_shards),
      incarnation_(NewIncarnation()) {
  checkpointer_.set_keep(options_.keep_checkpoints);
}

ShardStore::~ShardStore() = default;

absl::Status ShardStore::CheckJob(const std::string& job_id) const {
  if (ledger_.has_value()) return ledger_->CheckJob(job_id);
  return absl::FailedPreconditionError(
      "no model is registered on this server (call RegisterModel first)");
}

absl::StatusOr<RegisterResult> ShardStore::RegisterModel(
    const v1::ModelSpec& spec) {
  if (absl::Status s = ValidateSpec(spec); !s.ok()) return Reject(s);
  absl::MutexLock l(&mu_);
  if (spec.num_servers() != options_.num_shards) {
    return Reject(absl::FailedPreconditionError(
        absl::StrCat("ModelSpec.num_servers is ", spec.num_servers(),
                     " but this server was started as one of ",
                     options_.num_shards, " shards")));
  }
  if (ledger_.has_value()) {
    const std::string diff = DescribeSpecDifference(state_->spec(), spec);
    if (diff.empty()) return state_->Registration(false, ledger_->step());
    return Reject(absl::FailedPreconditionError(absl::StrCat(
        "a different model is already registered (", diff,
        ", registered vs requested); a shard server holds one "
        "model at a time: a second model needs servers of its "
        "own, and a new run of this one needs servers restarted without "
        "its state")));
  }
  ShardState::Options so{&pool_, options_.make_tier, options_.grad_slot_dir,
                         options_.env};
  ZS_ASSIGN_OR_RETURN(state_,
                      ShardState::Create(spec, options_.shard_index, so));
  ledger_.emplace(spec.job_id(), state_->owned(), spec.contributions_per_step(),
                  spec.alignment());
  if (draining_) ledger_->set_draining();
  return state_->Registration(true, 0);
}

absl::Status ShardStore::CheckWrite(const v1::WriteHeader& h) {
  absl::MutexLock l(&mu_);
  absl::Status s = CheckJob(h.job_id());
  if (s.ok() && h.dtype() != v1::DTYPE_FP32) {
    s = absl::InvalidArgumentError(
        "WriteParameters takes DTYPE_FP32 data only");
  }
  if (s.ok()) s = ledger_->CheckRange(h.offset(), h.length());
  if (s.ok()) s = ledger_->CheckNoPendingGradients();
  return s.ok() ? s : Reject(s);
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
  return state_->WriteMaster(offset - state_->owned().begin, data, n);
}

absl::Status ShardStore::WriteParameters(
    const v1::WriteHeader& h, const std::vector<std::string>& chunks) {
  uint64_t n = 0;
  for (const std::string& c : chunks) n += c.size() / 4;
  if (n != h.length()) {
    return Reject(absl::InvalidArgumentError(absl::StrCat(
        "WriteParameters carries ", n, " of ", h.length(), " elements")));
  }
  ZS_RETURN_IF_ERROR(CheckWrite(h));
  uint64_t at = h.offset() - state_->owned().begin;
  for (const std::string& c : chunks) {
    ZS_RETURN_IF_ERROR(state_->WriteMaster(
        at, reinterpret_cast<const float*>(c.data()), c.size() / 4));
    at += c.size() / 4;
  }
  return absl::OkStatus();
}

absl::Status ShardStore::CheckGather(const v1::GatherRequest& r) {
  absl::MutexLock l(&mu_);
  absl::Status s = CheckJob(r.job_id());
  if (s.ok() && DTypeSize(r.dtype()) == 0) {
    s = absl::InvalidArgumentError(
        absl::StrCat("unknown dtype ", static_cast<int>(r.dtype())));
  }
  if (s.ok()) s = ledger_->CheckRange(r.offset(), r.length());
  for (const v1::GatherRange& m : r.more()) {
    if (s.ok()) s = ledger_->CheckRange(m.offset(), m.length());
  }
  if (s.ok() && r.more_size() > 0 && r.has_shared()) {
    s = absl::InvalidArgumentError(
        "GatherRequest: shared memory takes one range (no `more`)");
  }
  return s.ok() ? s : Reject(s);
}

absl::Status ShardStore::GatherInto(uint64_t offset, uint64_t n,
                                    v1::DType dtype, void* out,
                                    uint64_t* step) {
  ZS_RETURN_IF_ERROR(
      state_->Gather(offset - state_->owned().begin, n, dtype, out, step));
  bytes_gathered_.fetch_add(n * DTypeSize(dtype));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<PushSession>> ShardStore::BeginPush(
    const v1::PushHeader& h) {
  absl::MutexLock l(&mu_);
  if (absl::Status s = CheckJob(h.job_id()); !s.ok()) return Reject(s);
  auto session = std::unique_ptr<PushSession>(
      new PushSession(this, state_.get(), h.length(), h.dtype()));
  absl::StatusOr<bool> fresh = ledger_->AdmitPush(h, &session->claim_);
  if (!fresh.ok()) return Reject(fresh.status());
  session->duplicate_ = !*fresh;
  session->offset_ = h.offset() - state_->owned().begin;
  return session;
}

void ShardStore::PushFinished(const PushClaim& claim) {
  absl::MutexLock l(&mu_);
  ledger_->FinishPush(claim);
}

absl::Status ShardStore::PushAdoptEpoch(PushClaim* claim) {
  absl::MutexLock l(&mu_);
  return ledger_->AdoptEpoch(claim);
}

void ShardStore::PushReleased(const PushClaim& claim) {
  absl::MutexLock l(&mu_);
  ledger_->ReleasePush(claim);
}

absl::StatusOr<PrepareResult> ShardStore::Prepare(const std::string& job_id,
                                                  uint64_t epoch,
                                                  uint64_t step) {
  absl::MutexLock l(&mu_);
  bool ready = false;
  PrepareResult r;
  absl::Status s = CheckJob(job_id);
  if (s.ok()) s = ledger_->BeginPrepare(epoch, step, &ready, &r);
  if (!s.ok()) return Reject(s);
  if (!ready) return r;
  ZS_RETURN_IF_ERROR(state_->Reduce(&r.sum_squares, &r.overflow));
  ledger_->SetPrepared(r);
  return r;
}

absl::StatusOr<CommitResult> ShardStore::Commit(
    const v1::CommitStepRequest& req) {
  std::optional<std::vector<AdamWHyper>> hypers;  // none: a skipped step
  CommitTicket t;
  {
    absl::MutexLock l(&mu_);
    if (absl::Status s = CheckJob(req.job_id()); !s.ok()) return Reject(s);
    if (req.prepare() && !ledger_->prepared() &&
        req.step() + 1 != ledger_->step()) {
      // Prepare first, with PrepareStep's answers (a retry of a commit
      // that is done goes on to BeginCommit, which acknowledges it).
      bool ready = false;
      PrepareResult r;
      absl::Status s =
          ledger_->BeginPrepare(req.epoch(), req.step(), &ready, &r);
      if (!s.ok()) return Reject(s);
      if (!ready) {
        return absl::AbortedError(absl::StrCat(
            "step ", req.step(), " has ", r.received_elements, " of ",
            r.expected_elements, " gradient elements; commit again"));
      }
      ZS_RETURN_IF_ERROR(state_->Reduce(&r.sum_squares, &r.overflow));
      ledger_->SetPrepared(r);
    }
    absl::StatusOr<CommitTicket> ticket = ledger_->BeginCommit(req);
    if (!ticket.ok()) return Reject(ticket.status());
    if (ticket->already_committed) return ticket->result;
    t = *ticket;
    if (!req.skip()) hypers.emplace();
    for (const v1::ParamGroup& g : state_->spec().param_groups()) {
      if (!hypers) break;
      hypers->push_back(
          GroupAdamWHyper(g, req.lr(), req.clip_coef(), t.optimizer_step));
    }
  }
  const auto start = std::chrono::steady_clock::now();
  const absl::Status stepped = state_->Step(std::move(hypers), t.step + 1);
  const std::chrono::duration<double> took =
      std::chrono::steady_clock::now() - start;
  absl::MutexLock l(&mu_);
  if (!stepped.ok()) {
    ledger_->AbortCommit();  // nothing changed; the leader may retry
    return stepped;
  }
  return ledger_->FinishCommit(req, took.count());
}

ShardFacts ShardStore::FactsLocked(uint64_t step) const {
  ShardFacts f;
  f.step = step;
  f.optimizer_steps = ledger_->optimizer_steps();
  f.plan_hash = state_->plan().Hash();
  f.owned = state_->owned();
  f.spec = state_->spec();
  f.trainer_state = ledger_->TrainerStateOf(step);
  return f;
}

absl::StatusOr<v1::CheckpointResponse> ShardStore::Checkpoint(
    const v1::CheckpointRequest& req) {
  ShardFacts f;
  {
    absl::MutexLock l(&mu_);
    absl::Status s = CheckJob(req.job_id());
    if (s.ok()) s = checkpointer_.CheckEnabled();
    if (s.ok() && !req.finalize()) s = ledger_->CheckCheckpointStep(req.step());
    if (!s.ok()) return Reject(s);
    ZS_RETURN_IF_ERROR(ledger_->CheckNotCommitting());
    f = FactsLocked(req.step());
    if (req.has_trainer_state()) {
      f.trainer_state = req.trainer_state();
    } else if (req.finalize() && checkpointed_state_.step() == req.step()) {
      // The ledger may have moved past the step since phase 1.
      f.trainer_state = checkpointed_state_;
    }
    if (!req.finalize()) checkpointed_state_ = f.trainer_state;
  }
  absl::StatusOr<v1::CheckpointResponse> r;
  if (req.finalize()) {
    r = checkpointer_.Finalize(req, f);
    return absl::IsInvalidArgument(r.status()) ? Reject(r.status()) : r;
  }
  ZS_RETURN_IF_ERROR(state_->ReadCommitted(
      req.step(), [&](const checkpoint::ArraySource& arrays) {
        r = checkpointer_.WriteShard(f, arrays);
        return r.status();
      }));
  return r;
}

absl::Status ShardStore::RestoreManifest(const v1::CheckpointManifest& m,
                                         bool snapshot, uint64_t epoch) {
  v1::ModelSpec spec = m.spec();
  spec.set_num_servers(options_.num_shards);
  bool registered;
  {
    absl::MutexLock l(&mu_);
    registered = ledger_.has_value();
    const std::string diff =
        registered ? DescribeSpecDifference(state_->spec(), spec) : "";
    if (!diff.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint of step ", m.step(), " holds another model (", diff,
          ", registered vs checkpoint)"));
    }
  }
  // Load into fresh arrays; the store changes only once all of it checked
  // (an unregistered server registers the model only then). 3 x 4 bytes
  // per element: RESOURCE_EXHAUSTED when refused.
  Range owned;
  if (registered) {
    owned = state_->owned();
  } else {
    ZS_ASSIGN_OR_RETURN(PartitionPlan plan, PlanForSpec(spec));
    owned = plan.ServerRange(options_.shard_index);
  }
  const uint64_t n = owned.size();
  ZS_ASSIGN_OR_RETURN(
      storage::AlignedBuffer p,
      storage::AlignedBuffer::Allocate(n * 4, nullptr, "restoring weights"));
  ZS_ASSIGN_OR_RETURN(
      storage::AlignedBuffer moment1,
      storage::AlignedBuffer::Allocate(n * 4, nullptr, "restoring moments"));
  ZS_ASSIGN_OR_RETURN(
      storage::AlignedBuffer moment2,
      storage::AlignedBuffer::Allocate(n * 4, nullptr, "restoring moments"));
  ZS_RETURN_IF_ERROR(checkpointer_.Load(m, snapshot, owned, p.as<float>(),
                                        moment1.as<float>(),
                                        moment2.as<float>()));
  if (!registered) ZS_RETURN_IF_ERROR(RegisterModel(spec).status());
  absl::MutexLock l(&mu_);
  ZS_RETURN_IF_ERROR(ledger_->CheckNotCommitting());
  ZS_RETURN_IF_ERROR(state_->Load(p.as<float>(), moment1.as<float>(),
                                  moment2.as<float>(), m.step()));
  ledger_->Restored(m.step(), m.optimizer_steps(), epoch, m.trainer_state());
  return absl::OkStatus();
}

absl::StatusOr<v1::RestoreResponse> ShardStore::Restore(
    const v1::RestoreRequest& req) {
  v1::RestoreResponse resp;
  if (req.epoch() > kMaxEpoch) {
    return Reject(absl::InvalidArgumentError(
        absl::StrCat("epoch ", req.epoch(), " is above the largest epoch ",
                     kMaxEpoch, " (larger values are reserved)")));
  }
  if (req.resume()) {
    absl::MutexLock l(&mu_);
    if (absl::Status s = CheckJob(req.job_id()); !s.ok()) return Reject(s);
    absl::StatusOr<v1::TrainerState> state =
        ledger_->Resume(req.step(), req.epoch());
    if (!state.ok()) {  // a commit in progress is a race, not a rejection
      return absl::IsAborted(state.status()) ? state.status()
                                             : Reject(state.status());
    }
    resp.set_step(ledger_->step());
    *resp.mutable_trainer_state() = *std::move(state);
    return resp;
  }
  {
    absl::MutexLock l(&mu_);
    absl::Status s = checkpointer_.CheckEnabled();
    if (s.ok() && ledger_.has_value()) s = CheckJob(req.job_id());
    if (!s.ok()) return Reject(s);
  }
  absl::StatusOr<v1::CheckpointManifest> m = checkpointer_.Restore(
      req.step(), req.job_id(),
      [&](const v1::CheckpointManifest& m, bool snapshot) {
        return RestoreManifest(m, snapshot, req.epoch());
      });
  if (!m.ok()) return Reject(m.status());
  resp.set_step(m->step());
  *resp.mutable_trainer_state() = m->trainer_state();
  return resp;
}

absl::StatusOr<uint64_t> ShardStore::RestoreNewest(
    const std::function<void(const std::string&)>& log) {
  auto apply = [&](const v1::CheckpointManifest& m, bool snapshot) {
    return RestoreManifest(m, snapshot, 0);
  };
  ZS_ASSIGN_OR_RETURN(uint64_t step, checkpointer_.RestoreNewest(apply, log));
  absl::MutexLock l(&mu_);
  if (step != 0) ledger_->set_awaiting_restore();
  return step;
}

bool ShardStore::Drain(absl::Duration timeout) {
  absl::MutexLock l(&mu_);
  draining_ = true;
  if (!ledger_.has_value()) return true;
  ledger_->set_draining();
  // Pushes in flight are not waited for: their step is abandoned unless
  // it was prepared, which needs every push received.
  auto settled = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return ledger_->settled();
  };
  return mu_.AwaitWithTimeout(absl::Condition(&settled), timeout);
}

absl::StatusOr<std::string> ShardStore::WriteShutdownSnapshot() {
  ShardFacts f;
  {
    absl::MutexLock l(&mu_);
    if (!checkpointer_.enabled() || !ledger_.has_value() ||
        ledger_->step() == 0) {
      return std::string();
    }
    if (!ledger_->CheckNotCommitting().ok()) {
      return absl::AbortedError("a commit is still in progress");
    }
    f = FactsLocked(ledger_->step());
  }
  absl::StatusOr<std::string> path;
  ZS_RETURN_IF_ERROR(
      state_->ReadCommitted(f.step, [&](const checkpoint::ArraySource& arrays) {
        path = checkpointer_.WriteSnapshot(f, arrays);
        return path.status();
      }));
  return path;
}

void ShardStore::SpecInto(v1::ModelSpec* spec) const {
  absl::MutexLock l(&mu_);
  if (ledger_.has_value()) *spec = state_->spec();
}

std::string ShardStore::job_id() const {
  absl::MutexLock l(&mu_);
  return ledger_.has_value() ? state_->spec().job_id() : "";
}

StoreStats ShardStore::Stats(bool with_ledger) const {
  StoreStats s;
  s.requests_rejected = rejected_.load();
  s.bytes_pushed = bytes_pushed_.load();
  s.bytes_gathered = bytes_gathered_.load();
  s.storage = options_.storage_name;
  s.incarnation = incarnation_;
  s.checkpoint_steps = checkpointer_.steps();
  s.checkpoints_written = checkpointer_.written();
  absl::MutexLock l(&mu_);
  if (!ledger_.has_value()) return s;
  ledger_->FillStats(with_ledger, &s);
  state_->FillStats(&s);
  return s;
}

}  // namespace zeroshard
