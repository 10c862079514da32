#include "server/checkpoint/checkpointer.h"

#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace zeroshard {

Checkpointer::Checkpointer(Env* env, std::string dir, uint32_t shard,
                           uint32_t num_shards, Log log)
    : env_(env != nullptr ? env : DefaultEnv()),
      dir_(std::move(dir)),
      shard_(shard),
      num_shards_(num_shards),
      log_(log != nullptr ? std::move(log) : [](const std::string& line) {
        std::printf("zeroshard-server: %s\n", line.c_str());
        std::fflush(stdout);
      }) {}

absl::Status Checkpointer::CheckEnabled() const {
  if (enabled()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      "this server was started without --checkpoint_dir");
}

v1::ShardCheckpointHeader Checkpointer::Header(const ShardFacts& f) const {
  v1::ShardCheckpointHeader h;
  h.set_step(f.step);
  h.set_optimizer_steps(f.optimizer_steps);
  *h.mutable_spec() = f.spec;
  h.set_shard_index(shard_);
  h.set_offset(f.owned.begin);
  h.set_length(f.owned.size());
  h.set_block_bytes(checkpoint::kDefaultBlockBytes);
  return h;
}

std::string Checkpointer::StepDir(uint64_t step) const {
  return JoinPath(dir_, checkpoint::StepDirName(step));
}

absl::StatusOr<v1::CheckpointResponse> Checkpointer::WriteShard(
    const ShardFacts& f, const checkpoint::ArraySource& read) const {
  ZS_ASSIGN_OR_RETURN(v1::CheckpointShard shard,
                      checkpoint::WriteShardFile(env_, dir_, Header(f), read));
  v1::CheckpointResponse resp;
  resp.set_step(f.step);
  resp.set_path(JoinPath(StepDir(f.step), shard.file()));
  resp.set_crc32c(shard.crc32c());
  *resp.mutable_shard() = std::move(shard);
  return resp;
}

absl::StatusOr<v1::CheckpointResponse> Checkpointer::Finalize(
    const v1::CheckpointRequest& req, const ShardFacts& f) {
  ZS_ASSIGN_OR_RETURN(v1::ShardCheckpointHeader own,
                      checkpoint::ReadShardHeader(
                          env_, dir_, req.step(),
                          checkpoint::ShardFileName(shard_, num_shards_)));
  v1::CheckpointManifest m;
  m.set_step(req.step());
  m.set_optimizer_steps(own.optimizer_steps());
  *m.mutable_spec() = own.spec();
  *m.mutable_shards() = req.shards();
  m.set_tag(req.tag());
  m.set_plan_hash(f.plan_hash);
  *m.mutable_trainer_state() = f.trainer_state;
  // The names are the server's (a plain name each, inside the step
  // directory), and this shard's entry is the file it wrote in phase 1.
  ZS_RETURN_IF_ERROR(checkpoint::CheckManifest(m, /*snapshot=*/false));
  for (const v1::CheckpointShard& s : m.shards()) {
    if (s.shard_index() != shard_) continue;
    absl::Status mine =
        checkpoint::ReadShardFile(env_, dir_, req.step(), s, Range{}, nullptr);
    if (!mine.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CheckpointShard of shard ", shard_,
          " (this server) does not match the file it wrote in phase 1: ",
          mine.message()));
    }
  }
  ZS_RETURN_IF_ERROR(checkpoint::WriteManifest(env_, dir_, m));
  {
    absl::MutexLock l(&mu_);
    ++written_;
  }
  Prune(req.step());
  Refresh();
  v1::CheckpointResponse resp;
  resp.set_step(req.step());
  resp.set_path(JoinPath(StepDir(req.step()), "MANIFEST"));
  return resp;
}

absl::StatusOr<std::string> Checkpointer::WriteSnapshot(
    const ShardFacts& f, const checkpoint::ArraySource& read) const {
  v1::CheckpointManifest m;
  m.set_step(f.step);
  m.set_optimizer_steps(f.optimizer_steps);
  *m.mutable_spec() = f.spec;
  m.set_plan_hash(f.plan_hash);
  m.set_tag("shutdown");
  *m.mutable_trainer_state() = f.trainer_state;
  // An older snapshot of this step names the file about to be rewritten:
  // remove it first (a crash in between leaves no snapshot, and the next
  // start restores the newest checkpoint, which is always safe).
  const std::string manifest_path =
      JoinPath(StepDir(f.step), checkpoint::SnapshotName(shard_, num_shards_));
  if (env_->FileExists(manifest_path)) {
    ZS_RETURN_IF_ERROR(env_->RemoveFile(manifest_path));
  }
  ZS_ASSIGN_OR_RETURN(*m.add_shards(),
                      checkpoint::WriteShardFile(env_, dir_, Header(f), read,
                                                 /*snapshot=*/true));
  ZS_RETURN_IF_ERROR(checkpoint::WriteSnapshotManifest(env_, dir_, m));
  return JoinPath(StepDir(f.step),
                  checkpoint::SnapshotName(shard_, num_shards_));
}

absl::Status Checkpointer::Load(const v1::CheckpointManifest& manifest,
                                bool snapshot, Range owned, float* p, float* m,
                                float* v) const {
  float* dst[checkpoint::kArrays] = {p, m, v};
  return checkpoint::LoadRange(
      env_, dir_, manifest, owned,
      [&](int a, uint64_t offset, uint64_t count, const float* data) {
        std::memcpy(dst[a] + offset, data, count * 4);
        return absl::OkStatus();
      },
      snapshot);
}

absl::StatusOr<v1::CheckpointManifest> Checkpointer::Restore(
    uint64_t step, const std::string& job_id, const Apply& apply) {
  ZS_RETURN_IF_ERROR(CheckEnabled());
  ZS_ASSIGN_OR_RETURN(checkpoint::Listing listing,
                      checkpoint::ListCheckpoints(env_, dir_));
  for (const auto& [damaged, why] : listing.damaged) {
    if (step != 0 && damaged == step) return why;
  }
  absl::Status last = absl::NotFoundError(absl::StrCat(
      "no complete checkpoint",
      step != 0 ? absl::StrCat(" of step ", step) : "", " in ", dir_));
  for (const v1::CheckpointManifest& m : listing.complete) {
    if (step != 0 && m.step() != step) continue;
    if (m.spec().job_id() != job_id) {
      last = absl::NotFoundError(
          absl::StrCat("the checkpoint of step ", m.step(), " belongs to job '",
                       m.spec().job_id(), "', not '", job_id, "'"));
      continue;
    }
    last = apply(m, /*snapshot=*/false);
    if (last.ok()) {
      Refresh();
      return m;
    }
    if (!absl::IsDataLoss(last) || step != 0) break;
    log_(absl::StrCat(
        "checkpoint ", checkpoint::StepDirName(m.step()), " is damaged (",
        last.message(),
        "); Restore is falling back to the previous complete one"));
  }
  return last;
}

absl::StatusOr<uint64_t> Checkpointer::RestoreNewest(const Apply& apply,
                                                     const Log& log) {
  if (!enabled()) return 0;
  ZS_ASSIGN_OR_RETURN(checkpoint::Listing listing,
                      checkpoint::ListCheckpoints(env_, dir_));
  for (const std::string& why : listing.skipped) {
    log(absl::StrCat("checkpoint ", why, "; ignored"));
  }
  uint64_t restored = RestoreSnapshot(
      listing.complete.empty() ? 0 : listing.complete[0].step(), apply, log);
  for (size_t i = 0; restored == 0 && i < listing.complete.size(); ++i) {
    const v1::CheckpointManifest& m = listing.complete[i];
    absl::Status s = apply(m, /*snapshot=*/false);
    if (s.ok()) {
      restored = m.step();
      log(absl::StrCat("restored step ", m.step(), " of job '",
                       m.spec().job_id(), "' from ", StepDir(m.step())));
    } else if (absl::IsDataLoss(s)) {
      log(absl::StrCat("checkpoint ", checkpoint::StepDirName(m.step()),
                       " is damaged (", s.message(), "); ",
                       i + 1 < listing.complete.size()
                           ? "falling back to the previous complete checkpoint"
                           : "no older complete checkpoint to fall back to"));
    } else {
      return s;
    }
  }
  Refresh();
  return restored;
}

uint64_t Checkpointer::RestoreSnapshot(uint64_t newest, const Apply& apply,
                                       const Log& log) const {
  absl::StatusOr<std::vector<checkpoint::Snapshot>> snaps =
      checkpoint::FindSnapshots(env_, dir_, shard_, num_shards_);
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
      s = apply(snap.manifest, /*snapshot=*/true);
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
    for (const std::string& path : {snap.path, snap.data_path}) {
      if (path == snap.data_path && !env_->FileExists(path)) continue;
      absl::Status removed = env_->RemoveFile(path);
      if (!removed.ok()) {
        log(absl::StrCat("cannot remove the shutdown snapshot's ", path, ": ",
                         removed.message()));
      }
    }
  }
  return restored;
}

void Checkpointer::Prune(uint64_t finalized) {
  absl::StatusOr<checkpoint::Listing> listing =
      checkpoint::ListCheckpoints(env_, dir_);
  if (!listing.ok()) {
    log_(absl::StrCat("old checkpoints not listed for removal (",
                      listing.status().message(), ")"));
    return;
  }
  if (listing->complete.empty()) return;
  auto said = [](const absl::StatusOr<bool>& gone) {
    return !gone.ok() ? absl::StrCat(": ", gone.status().message())
           : *gone    ? std::string()
                      : std::string(" (the directory keeps other files)");
  };
  // Attempts a killed writer abandoned before the step just finalized: no
  // server writes them any more (every server wrote its shard of that step
  // before any finalized it; a later step's attempt, after a restore to an
  // older step, may be in progress and is left alone).
  for (uint64_t step : listing->incomplete) {
    if (step >= finalized) continue;
    absl::StatusOr<bool> gone = checkpoint::RemoveAbandoned(env_, dir_, step);
    log_(absl::StrCat(gone.ok() ? "removed" : "cannot remove",
                      " the abandoned checkpoint attempt ", StepDir(step),
                      " (no MANIFEST)", said(gone)));
  }
  if (keep_ == 0) return;
  for (size_t i = keep_; i < listing->complete.size(); ++i) {
    const v1::CheckpointManifest& m = listing->complete[i];
    absl::StatusOr<bool> gone = checkpoint::RemoveCheckpoint(env_, dir_, m);
    log_(absl::StrCat(gone.ok() ? "removed" : "cannot remove", " checkpoint ",
                      StepDir(m.step()), " (--keep_checkpoints=", keep_, ")",
                      said(gone)));
  }
}

bool Checkpointer::HasRestorable() const {
  if (!enabled()) return false;
  absl::StatusOr<checkpoint::Listing> listing =
      checkpoint::ListCheckpoints(env_, dir_);
  if (listing.ok() && !listing->complete.empty()) return true;
  absl::StatusOr<std::vector<checkpoint::Snapshot>> snaps =
      checkpoint::FindSnapshots(env_, dir_, shard_, num_shards_);
  if (!snaps.ok()) return false;
  for (const checkpoint::Snapshot& snap : *snaps) {
    if (snap.error.ok()) return true;
  }
  return false;
}

void Checkpointer::Refresh() {
  std::vector<uint64_t> steps;
  if (enabled()) {
    absl::StatusOr<checkpoint::Listing> listing =
        checkpoint::ListCheckpoints(env_, dir_);
    if (listing.ok()) {
      for (const auto& m : listing->complete) steps.push_back(m.step());
    }
  }
  absl::MutexLock l(&mu_);
  steps_ = std::move(steps);
}

std::vector<uint64_t> Checkpointer::steps() const {
  absl::MutexLock l(&mu_);
  return steps_;
}

uint64_t Checkpointer::written() const {
  absl::MutexLock l(&mu_);
  return written_;
}

}  // namespace zeroshard
