// ShardStore's checkpoints and restore (see shard_store.h and
// server/checkpoint/checkpoint_files.h).
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/model_spec.h"
#include "common/status_macros.h"
#include "server/checkpoint/checkpoint_files.h"
#include "server/store/shard_store.h"
#include "server/store/shard_store_internal.h"

namespace zeroshard {
namespace {

storage::Env* EnvOf(const StoreOptions& o) {
  return o.env != nullptr ? o.env : storage::DefaultEnv();
}

}  // namespace

absl::StatusOr<v1::CheckpointResponse> ShardStore::Checkpoint(
    const v1::CheckpointRequest& req) {
  storage::Env* env = EnvOf(options_);
  const std::string& root = options_.checkpoint_dir;
  v1::ShardCheckpointHeader h;
  {
    absl::MutexLock l(&mu_);
    absl::Status s = CheckJob(req.job_id());
    if (!s.ok()) return Reject(s);
    if (root.empty()) {
      return Reject(absl::FailedPreconditionError(
          "this server was started without --checkpoint_dir"));
    }
    if (!req.finalize() && req.step() != step_) {
      return Reject(absl::FailedPreconditionError(absl::StrCat(
          "checkpoint of step ", req.step(),
          " requested, but the server has committed ", step_, " steps")));
    }
    if (committing_)
      return absl::AbortedError("a commit is in progress; retry");
    h = ShardHeaderLocked(req.step());
  }
  v1::CheckpointResponse resp;
  resp.set_step(req.step());
  const std::string dir =
      storage::JoinPath(root, checkpoint::StepDirName(req.step()));
  const std::string own =
      checkpoint::ShardFileName(options_.shard_index, options_.num_shards);
  if (req.finalize()) {
    // The optimizer step count of `step` comes from this shard's own file,
    // which also proves phase 1 happened here.
    ZS_ASSIGN_OR_RETURN(auto reader, checkpoint::ShardFileReader::Open(
                                         env, storage::JoinPath(dir, own)));
    v1::CheckpointManifest m;
    m.set_step(req.step());
    m.set_optimizer_steps(reader->header().optimizer_steps());
    *m.mutable_spec() = reader->header().spec();
    *m.mutable_shards() = req.shards();
    m.set_tag(req.tag());
    {
      absl::MutexLock l(&mu_);
      m.set_plan_hash(plan_->Hash());
      *m.mutable_trainer_state() = req.has_trainer_state()
                                       ? req.trainer_state()
                                       : TrainerStateLocked(req.step());
    }
    absl::Status written = checkpoint::WriteManifest(env, root, m);
    if (absl::IsInvalidArgument(written)) return Reject(written);
    ZS_RETURN_IF_ERROR(written);
    {
      absl::MutexLock l(&mu_);
      ++checkpoints_written_;
    }
    RefreshCheckpointList();
    resp.set_path(storage::JoinPath(dir, "MANIFEST"));
    return resp;
  }
  absl::ReaderMutexLock d(&data_mu_);
  if (data_step_ != req.step()) {
    return absl::AbortedError(absl::StrCat(
        "step ", data_step_, " was committed meanwhile; retry the checkpoint"));
  }
  ZS_ASSIGN_OR_RETURN(v1::CheckpointShard shard, WriteShardFileLocked(h));
  resp.set_path(storage::JoinPath(dir, shard.file()));
  resp.set_crc32c(shard.crc32c());
  *resp.mutable_shard() = shard;
  return resp;
}

v1::ShardCheckpointHeader ShardStore::ShardHeaderLocked(uint64_t step) const {
  v1::ShardCheckpointHeader h;
  h.set_step(step);
  h.set_optimizer_steps(optimizer_steps_);
  *h.mutable_spec() = spec_;
  h.set_shard_index(options_.shard_index);
  h.set_offset(owned_.begin);
  h.set_length(owned_.size());
  h.set_block_bytes(checkpoint::kDefaultBlockBytes);
  return h;
}

v1::TrainerState ShardStore::TrainerStateLocked(uint64_t step) const {
  if (trainer_state_.step() == step) return trainer_state_;
  v1::TrainerState unknown;
  unknown.set_step(step);
  return unknown;
}

absl::StatusOr<v1::CheckpointShard> ShardStore::WriteShardFileLocked(
    const v1::ShardCheckpointHeader& h) {
  std::vector<float> scratch;
  return checkpoint::WriteShardFile(
      EnvOf(options_), options_.checkpoint_dir, h,
      [&](int a, uint64_t offset, uint64_t n, float* out) -> absl::Status {
        if (tier_ == nullptr) {
          const float* src = a == 0   ? buf_->master.get()
                             : a == 1 ? buf_->m.get()
                                      : buf_->v.get();
          std::memcpy(out, src + offset, n * 4);
          return absl::OkStatus();
        }
        if (a == 0) return tier_->ReadMaster(offset, n, out);
        scratch.resize(n);
        return a == 1 ? tier_->ReadMoments(offset, n, out, scratch.data())
                      : tier_->ReadMoments(offset, n, scratch.data(), out);
      });
}

bool ShardStore::Drain(absl::Duration timeout) {
  absl::MutexLock l(&mu_);
  draining_ = true;
  // Pushes in flight are not waited for: their step is abandoned unless
  // it was prepared, which needs every push received.
  return mu_.AwaitWithTimeout(
      absl::Condition(
          +[](ShardStore* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
            return !s->prepared_ && !s->committing_;
          },
          this),
      timeout);
}

absl::StatusOr<std::string> ShardStore::WriteShutdownSnapshot() {
  storage::Env* env = EnvOf(options_);
  const std::string& root = options_.checkpoint_dir;
  v1::ShardCheckpointHeader h;
  v1::CheckpointManifest m;
  {
    absl::MutexLock l(&mu_);
    if (root.empty() || !registered_ || step_ == 0) return std::string();
    if (committing_) {
      return absl::AbortedError("a commit is still in progress");
    }
    h = ShardHeaderLocked(step_);
    m.set_step(step_);
    m.set_optimizer_steps(optimizer_steps_);
    *m.mutable_spec() = spec_;
    m.set_plan_hash(plan_->Hash());
    m.set_tag("shutdown");
    *m.mutable_trainer_state() = TrainerStateLocked(step_);
  }
  absl::ReaderMutexLock d(&data_mu_);
  ZS_ASSIGN_OR_RETURN(*m.add_shards(), WriteShardFileLocked(h));
  ZS_RETURN_IF_ERROR(checkpoint::WriteSnapshotManifest(env, root, m));
  return storage::JoinPath(
      storage::JoinPath(root, checkpoint::StepDirName(m.step())),
      checkpoint::SnapshotName(options_.shard_index, options_.num_shards));
}

uint64_t ShardStore::RestoreSnapshot(
    uint64_t newest, const std::function<void(const std::string&)>& log) {
  storage::Env* env = EnvOf(options_);
  absl::StatusOr<std::vector<checkpoint::Snapshot>> snaps =
      checkpoint::FindSnapshots(env, options_.checkpoint_dir,
                                options_.shard_index, options_.num_shards);
  if (!snaps.ok()) {
    log(absl::StrCat("shutdown snapshots not listed (",
                     snaps.status().message(), "); ignored"));
    return 0;
  }
  uint64_t restored = 0;
  // Single use: every snapshot is removed, the one loaded included (its
  // state lives on in this process; a crash before the job resumes falls
  // back to the checkpoints, which is always safe).
  for (const checkpoint::Snapshot& snap : *snaps) {
    absl::Status s = snap.error;
    if (s.ok() && restored == 0 && snap.manifest.step() > newest) {
      s = RestoreManifest(snap.manifest, 0);
      if (s.ok()) {
        restored = snap.manifest.step();
        log(absl::StrCat("restored step ", restored, " of job '",
                         snap.manifest.spec().job_id(),
                         "' from the shutdown snapshot ", snap.path));
      }
    } else if (s.ok()) {
      s = absl::FailedPreconditionError(
          restored != 0 ? "older than the one restored"
                        : absl::StrCat("not newer than checkpoint ", newest));
    }
    if (!s.ok()) {
      log(absl::StrCat("shutdown snapshot ", snap.path, ": ", s.message(),
                       "; ignored"));
    }
    absl::Status removed = env->RemoveFile(snap.path);
    if (!removed.ok()) {
      log(absl::StrCat("cannot remove the shutdown snapshot ", snap.path, ": ",
                       removed.message()));
    }
  }
  return restored;
}

absl::StatusOr<v1::RestoreResponse> ShardStore::Resume(
    const v1::RestoreRequest& req) {
  absl::MutexLock l(&mu_);
  absl::Status s = CheckJob(req.job_id());
  if (!s.ok()) return Reject(s);
  if (req.step() != step_ || trainer_state_.step() != step_) {
    return Reject(absl::FailedPreconditionError(absl::StrCat(
        "cannot resume at step ", req.step(), ": the server is at step ", step_,
        trainer_state_.step() != step_ ? " without the workers' state" : "")));
  }
  if (committing_) return absl::AbortedError("a commit is in progress; retry");
  ResetStepLocked();
  last_commit_valid_ = false;
  epoch_ = std::max(epoch_, req.epoch());
  awaiting_restore_ = false;
  v1::RestoreResponse resp;
  resp.set_step(step_);
  *resp.mutable_trainer_state() = trainer_state_;
  return resp;
}

void ShardStore::RefreshCheckpointList() {
  std::vector<uint64_t> steps;
  if (!options_.checkpoint_dir.empty()) {
    absl::StatusOr<checkpoint::Listing> listing =
        checkpoint::ListCheckpoints(EnvOf(options_), options_.checkpoint_dir);
    if (listing.ok()) {
      for (const auto& m : listing->complete) steps.push_back(m.step());
    }
  }
  absl::MutexLock l(&mu_);
  checkpoint_steps_ = std::move(steps);
}

absl::Status ShardStore::RestoreManifest(const v1::CheckpointManifest& manifest,
                                         uint64_t epoch) {
  v1::ModelSpec spec = manifest.spec();
  spec.set_num_servers(options_.num_shards);
  bool registered;
  {
    absl::MutexLock l(&mu_);
    registered = registered_;
    if (registered) {
      const std::string difference = DescribeSpecDifference(spec_, spec);
      if (!difference.empty()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "checkpoint of step ", manifest.step(), " holds another model (",
            difference, ", registered vs checkpoint)"));
      }
    }
  }
  if (!registered) {
    // Registration allocates the state (its initial values are replaced
    // below, or the store stays at step 0 if loading fails).
    ZS_RETURN_IF_ERROR(RegisterModel(spec).status());
  }
  // Load into fresh arrays; the store changes only once all of it checked.
  const uint64_t n = owned_.size();
  auto p = AllocateAligned<float>(n), m = AllocateAligned<float>(n),
       v = AllocateAligned<float>(n);
  float* dst[checkpoint::kArrays] = {p.get(), m.get(), v.get()};
  ZS_RETURN_IF_ERROR(checkpoint::LoadRange(
      EnvOf(options_), options_.checkpoint_dir, manifest, owned_,
      [&](int a, uint64_t offset, uint64_t count, const float* data) {
        std::memcpy(dst[a] + offset, data, count * 4);
        return absl::OkStatus();
      }));
  absl::MutexLock l(&mu_);
  if (committing_) return absl::AbortedError("a commit is in progress; retry");
  absl::MutexLock d(&data_mu_);
  if (tier_ != nullptr) {
    // A failure here leaves the tier marked as interrupted (it refuses to
    // open); the checkpoint itself is intact.
    ZS_RETURN_IF_ERROR(tier_->WriteMaster(0, p.get(), n));
    ZS_RETURN_IF_ERROR(tier_->WriteMoments(0, m.get(), v.get(), n));
    ZS_RETURN_IF_ERROR(tier_->Flush());
  } else {
    buf_->master = std::move(p);
    buf_->m = std::move(m);
    buf_->v = std::move(v);
    RefreshServing(0, n);
  }
  data_step_ = manifest.step();
  step_ = manifest.step();
  optimizer_steps_ = manifest.optimizer_steps();
  ResetStepLocked();
  last_commit_valid_ = false;
  epoch_ = std::max(epoch_, epoch);
  trainer_state_ = manifest.trainer_state();
  // The ledger keeps the commits that lead up to the restored step.
  while (!ledger_.empty() && ledger_.back().step >= manifest.step()) {
    ledger_.pop_back();
  }
  if (!ledger_.empty() && ledger_.back().step + 1 != manifest.step()) {
    ledger_.clear();  // rolled forward past steps this server never saw
  }
  if (ledger_.empty()) ledger_first_step_ = manifest.step();
  restored_step_ = manifest.step();
  awaiting_restore_ = false;
  return absl::OkStatus();
}

absl::StatusOr<v1::RestoreResponse> ShardStore::Restore(
    const v1::RestoreRequest& req) {
  if (req.resume()) return Resume(req);
  {
    absl::MutexLock l(&mu_);
    if (options_.checkpoint_dir.empty()) {
      return Reject(absl::FailedPreconditionError(
          "this server was started without --checkpoint_dir"));
    }
    if (registered_) {
      absl::Status s = CheckJob(req.job_id());
      if (!s.ok()) return Reject(s);
    }
  }
  ZS_ASSIGN_OR_RETURN(
      checkpoint::Listing listing,
      checkpoint::ListCheckpoints(EnvOf(options_), options_.checkpoint_dir));
  absl::Status last = absl::NotFoundError(
      absl::StrCat("no complete checkpoint",
                   req.step() ? absl::StrCat(" of step ", req.step()) : "",
                   " in ", options_.checkpoint_dir));
  for (const v1::CheckpointManifest& m : listing.complete) {
    if (req.step() != 0 && m.step() != req.step()) continue;
    if (m.spec().job_id() != req.job_id()) {
      last = absl::NotFoundError(
          absl::StrCat("the checkpoint of step ", m.step(), " belongs to job '",
                       m.spec().job_id(), "', not '", req.job_id(), "'"));
      continue;
    }
    last = RestoreManifest(m, req.epoch());
    if (last.ok()) {
      RefreshCheckpointList();
      v1::RestoreResponse resp;
      resp.set_step(m.step());
      *resp.mutable_trainer_state() = m.trainer_state();
      return resp;
    }
    if (!absl::IsDataLoss(last) || req.step() != 0) break;
  }
  return Reject(last);
}

absl::StatusOr<uint64_t> ShardStore::RestoreNewest(
    const std::function<void(const std::string&)>& log) {
  if (options_.checkpoint_dir.empty()) return 0;
  ZS_ASSIGN_OR_RETURN(
      checkpoint::Listing listing,
      checkpoint::ListCheckpoints(EnvOf(options_), options_.checkpoint_dir));
  for (const std::string& why : listing.skipped) {
    log(absl::StrCat("checkpoint ", why, "; ignored"));
  }
  const uint64_t snapshot = RestoreSnapshot(
      listing.complete.empty() ? 0 : listing.complete[0].step(), log);
  if (snapshot != 0) {
    {
      absl::MutexLock l(&mu_);
      awaiting_restore_ = true;
    }
    RefreshCheckpointList();
    return snapshot;
  }
  for (const v1::CheckpointManifest& m : listing.complete) {
    absl::Status s = RestoreManifest(m, 0);
    if (s.ok()) {
      {
        absl::MutexLock l(&mu_);
        awaiting_restore_ = true;
      }
      log(absl::StrCat("restored step ", m.step(), " of job '",
                       m.spec().job_id(), "' from ",
                       storage::JoinPath(options_.checkpoint_dir,
                                         checkpoint::StepDirName(m.step()))));
      RefreshCheckpointList();
      return m.step();
    }
    if (!absl::IsDataLoss(s)) return s;
    log(absl::StrCat("checkpoint ", checkpoint::StepDirName(m.step()),
                     " is damaged (", s.message(),
                     "); falling back to the previous complete checkpoint"));
  }
  RefreshCheckpointList();
  return 0;
}

}  // namespace zeroshard
