#include "ctl/checkpoint_list.h"

#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "ctl/state_text.h"
#include "server/checkpoint/checkpoint_files.h"

namespace zeroshard::ctl {
namespace {

uint64_t Bytes(const v1::CheckpointManifest& m) {
  uint64_t total = 0;
  for (const v1::CheckpointShard& s : m.shards()) total += s.bytes();
  return total;
}

}  // namespace

absl::StatusOr<CheckpointList> ListCheckpointDir(Env* env,
                                                 const std::string& root,
                                                 bool verify) {
  ZS_ASSIGN_OR_RETURN(checkpoint::Listing listing,
                      checkpoint::ListCheckpoints(env, root));
  CheckpointList out;
  std::string& t = out.text;
  absl::StrAppend(&t, "checkpoints in ", root,
                  verify ? " (every file read and checked)" : "", ":\n");
  const v1::CheckpointManifest* newest = nullptr;
  for (const v1::CheckpointManifest& m : listing.complete) {
    absl::Status checked;
    if (verify) {
      for (const v1::CheckpointShard& shard : m.shards()) {
        checked = checkpoint::ReadShardFile(
            env, root, m.step(), shard,
            Range{shard.offset(), shard.offset() + shard.length()}, nullptr);
        if (!checked.ok()) break;
      }
    }
    absl::StrAppendFormat(
        &t, "  step %d  %s  job '%s', %d of %d shards, %d bytes%s; %s\n",
        m.step(), checked.ok() ? "complete" : "DAMAGED", m.spec().job_id(),
        m.shards_size(), m.spec().num_servers(), Bytes(m),
        m.tag().empty() ? "" : absl::StrCat(", tag \"", m.tag(), "\""),
        TrainerStateText(m.trainer_state()));
    if (!checked.ok()) {
      absl::StrAppend(&t, "    ", checked.ToString(), "\n");
      ++out.damaged;
      continue;
    }
    ++out.complete;
    if (newest == nullptr) newest = &m;
  }
  for (uint64_t step : listing.incomplete) {
    absl::StrAppendFormat(&t,
                          "  step %d  incomplete (no MANIFEST: a checkpoint "
                          "cut short, or still being written); ignored\n",
                          step);
  }
  for (const auto& [step, why] : listing.damaged) {
    absl::StrAppendFormat(&t, "  step %d  DAMAGED: %s; ignored\n", step,
                          why.ToString());
    ++out.damaged;
  }
  // Shutdown snapshots (one per server that was stopped with SIGTERM),
  // for the K of the newest checkpoint.
  const uint32_t k =
      listing.complete.empty() ? 0 : listing.complete[0].spec().num_servers();
  for (uint32_t shard = 0; shard < k; ++shard) {
    ZS_ASSIGN_OR_RETURN(std::vector<checkpoint::Snapshot> snapshots,
                        checkpoint::FindSnapshots(env, root, shard, k));
    for (const checkpoint::Snapshot& s : snapshots) {
      if (!s.error.ok()) {
        absl::StrAppend(&t, "  shutdown snapshot ", s.path,
                        ": DAMAGED: ", s.error.ToString(), "\n");
        ++out.damaged;
        continue;
      }
      absl::StrAppendFormat(
          &t,
          "  shutdown snapshot of shard %d of %d at step %d (loaded once by "
          "that server's next start if newer than every checkpoint)\n",
          shard, k, s.manifest.step());
    }
  }
  if (newest != nullptr) {
    absl::StrAppendFormat(
        &t,
        "newest complete checkpoint%s: step %d (what servers started on "
        "this directory restore, unless each has a newer shutdown snapshot)\n",
        verify ? " that checks out" : "", newest->step());
  } else {
    absl::StrAppend(&t, "no complete checkpoint: a job starts afresh\n");
  }
  return out;
}

}  // namespace zeroshard::ctl
