// Checkpointer: one shard's checkpoints and shutdown snapshots under the
// server's --checkpoint_dir (file formats and the two-phase protocol:
// checkpoint_files.h), and the choice of what to restore:
//
//   Restore        checkpoint S of the job (a damaged one: DATA_LOSS, and
//                  nothing loaded), or the newest complete one that loads
//                  (a damaged one — DATA_LOSS — falls back to the one
//                  before, with a log line);
//   RestoreNewest  at start: this shard's shutdown snapshot when it is newer
//                  than every complete checkpoint (snapshots are single
//                  use: every one is removed, the one loaded included), else
//                  the newest complete checkpoint that loads.
// Every file loaded is checked whole against its manifest (size, CRC):
// checkpoint_files.h.
//
// The checkpointer owns no model state: writers read it through an
// ArraySource, and restores hand each candidate manifest to the store's
// `apply`, which loads it (Load) or says why not.
//
// Threading: thread-safe. Errors: FAILED_PRECONDITION without a directory;
// NOT_FOUND for a step without a complete checkpoint; DATA_LOSS naming the
// file and block for a checksum mismatch; the Env's codes for I/O.
#ifndef ZEROSHARD_SERVER_CHECKPOINT_CHECKPOINTER_H_
#define ZEROSHARD_SERVER_CHECKPOINT_CHECKPOINTER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/env/env.h"
#include "common/partition.h"
#include "proto/zeroshard.pb.h"
#include "server/checkpoint/checkpoint_files.h"

namespace zeroshard {

// What a checkpoint records of a shard at a committed step.
struct ShardFacts {
  uint32_t shard = 0;
  uint64_t step = 0;
  uint64_t optimizer_steps = 0;
  uint64_t plan_hash = 0;
  Range owned;
  v1::ModelSpec spec;
  v1::TrainerState trainer_state;  // the workers' state recorded with it
};

class Checkpointer {
 public:
  // Loads a candidate checkpoint into the store (its error, DATA_LOSS for
  // a damaged one, makes the caller try an older one where it may).
  // `snapshot`: the manifest is a shutdown snapshot's (pass it to Load).
  using Apply =
      std::function<absl::Status(const v1::CheckpointManifest&, bool snapshot)>;
  using Log = std::function<void(const std::string&)>;

  // `dir` empty: checkpoints are off. `env` null: DefaultEnv(). `log`
  // (lines for the server's log, e.g. a damaged checkpoint skipped by
  // Restore) null: "zeroshard-server: LINE" on stdout.
  Checkpointer(Env* env, std::string dir, uint32_t shard, uint32_t num_shards,
               Log log = nullptr);

  // Keep only the newest `keep` complete checkpoints: each Finalize then
  // removes the older ones (RemoveCheckpoint; a failure is logged, never
  // the checkpoint's). 0 (the default): keep every one. Before any call.
  void set_keep(uint32_t keep) { keep_ = keep; }

  bool enabled() const { return !dir_.empty(); }
  const std::string& dir() const { return dir_; }
  // FAILED_PRECONDITION when checkpoints are off.
  absl::Status CheckEnabled() const;

  // Phase 1 of checkpoint `f.step`: this shard's file, p, m and v read
  // from `read`.
  absl::StatusOr<v1::CheckpointResponse> WriteShard(
      const ShardFacts& f, const checkpoint::ArraySource& read) const;
  // Phase 2: the MANIFEST of req.step() listing req.shards(), with the
  // optimizer step count and spec of this shard's own file of that step
  // (which proves phase 1 ran here). INVALID_ARGUMENT for a shard list
  // that does not cover the plan, a CheckpointShard.file other than the
  // name the server gives that shard's file, or an entry for this shard
  // that does not match its file (size, CRC, range; read whole).
  absl::StatusOr<v1::CheckpointResponse> Finalize(
      const v1::CheckpointRequest& req, const ShardFacts& f);
  // A shutdown snapshot of step `f.step`, in its own files (never a file
  // a checkpoint's MANIFEST names). Returns the path of its manifest.
  absl::StatusOr<std::string> WriteSnapshot(
      const ShardFacts& f, const checkpoint::ArraySource& read) const;

  // Loads `manifest`'s p, m, v over `owned` (written by any K) into three
  // arrays of owned.size() floats.
  absl::Status Load(const v1::CheckpointManifest& manifest, bool snapshot,
                    Range owned, float* p, float* m, float* v) const;
  // See the file comment. Restore: `step` 0 for the newest; returns the
  // manifest restored.
  absl::StatusOr<v1::CheckpointManifest> Restore(uint64_t step,
                                                 const std::string& job_id,
                                                 const Apply& apply);
  // Returns the step restored (0: nothing to restore). `log` gets one line
  // per snapshot or checkpoint skipped and one for the one restored.
  absl::StatusOr<uint64_t> RestoreNewest(const Apply& apply, const Log& log);

  // Whether RestoreNewest would find something to load: a complete
  // checkpoint, or a shutdown snapshot of this shard (lists the directory;
  // loads and removes nothing). False when checkpoints are off.
  bool HasRestorable() const;

  // Complete checkpoints as last listed, newest first; MANIFESTs written.
  std::vector<uint64_t> steps() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t written() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  v1::ShardCheckpointHeader Header(const ShardFacts& f) const;
  std::string StepDir(uint64_t step) const;
  // Rereads the listing of complete checkpoints.
  void Refresh() ABSL_LOCKS_EXCLUDED(mu_);
  // After checkpoint `finalized` completed: removes the complete
  // checkpoints older than the newest keep_ (keep_ > 0) and the abandoned
  // attempts (no MANIFEST) older than `finalized`.
  void Prune(uint64_t finalized);
  // Loads the newest snapshot newer than checkpoint `newest`; removes all.
  uint64_t RestoreSnapshot(uint64_t newest, const Apply& apply,
                           const Log& log) const;

  Env* const env_;
  const std::string dir_;
  const uint32_t shard_, num_shards_;
  const Log log_;
  uint32_t keep_ = 0;
  mutable absl::Mutex mu_;
  std::vector<uint64_t> steps_ ABSL_GUARDED_BY(mu_);
  uint64_t written_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_CHECKPOINT_CHECKPOINTER_H_
