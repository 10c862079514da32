// The files of a shard server's checkpoints (issue 7), through Env
// so that tests run on MemEnv and FaultEnv.
//
// Layout under a checkpoint root (shared by the servers of a job on one
// machine; per server on Kubernetes, where resharding needs the old shards'
// files copied into the root first):
//   step-0000000012/shard-00001-of-00003.ckpt   one per shard (phase 1)
//   step-0000000012/MANIFEST                    written last (phase 2)
// A step is complete when its MANIFEST exists, checks out and lists every
// shard of the plan that wrote it; anything else is ignored.
//
// Shard file: "ZSCKPT1\n", uint32 length L (little-endian), L bytes of
// ShardCheckpointHeader, its CRC-32C; then the payload p ‖ m ‖ v (fp32, the
// owned range each) in blocks of header.block_bytes, each followed by its
// CRC-32C. The file's own CRC-32C (CheckpointShard.crc32c) is that of its
// bytes without the per-block CRCs. MANIFEST: "ZSMANI1\n", uint32 length,
// CheckpointManifest, CRC-32C.
// Every file is written under a temporary name, synced, renamed into place,
// and its directory synced: a crash leaves either the old or the whole new
// file. Files are 0600 and directories 0700 (Env).
//
// Reading trusts nothing on disk or in a request (issue 23): a MANIFEST's
// file names must be exactly the names the server generates (checked when
// a finalize request brings them and again at every read), files are
// opened inside their step directory without following links (a step
// directory, MANIFEST or shard file that is a symbolic link or not a
// regular file is refused), and every shard file read is checked whole:
// its size and file CRC against the manifest, each block against its CRC.
//
// Errors: DATA_LOSS (naming the file and the block) for a checksum
// mismatch, truncation or bad magic; for a file that is missing, a link,
// not a regular file or not named as the server names it, DATA_LOSS with
// one text (Unusable) that says nothing about other paths; the Env's codes
// for other I/O.
// Threading: the functions are thread-safe.
#ifndef ZEROSHARD_SERVER_CHECKPOINT_CHECKPOINT_FILES_H_
#define ZEROSHARD_SERVER_CHECKPOINT_CHECKPOINT_FILES_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/env/env.h"
#include "common/partition.h"
#include "proto/zeroshard.pb.h"

namespace zeroshard {
namespace checkpoint {

inline constexpr int kArrays = 3;  // p, m, v
inline constexpr uint32_t kDefaultBlockBytes = 1 << 20;

std::string StepDirName(uint64_t step);  // "step-0000000012"
std::string ShardFileName(uint32_t shard, uint32_t num_shards);
// The data file of a shutdown snapshot: "snapshot-00001-of-00003.ckpt".
std::string SnapshotFileName(uint32_t shard, uint32_t num_shards);

// The one error for a file of checkpoint `step` that is missing, a link,
// not a regular file, outside its step directory or not named as the
// server names it (DATA_LOSS; the same text whichever it is).
absl::Status Unusable(uint64_t step);

// INVALID_ARGUMENT unless `m` lists every shard of m.spec().num_servers()
// exactly once (a snapshot: one shard) and each names exactly
// ShardFileName (a snapshot: SnapshotFileName) of its index and the
// manifest's number of servers (the message names CheckpointShard.file,
// not the name given).
absl::Status CheckManifest(const v1::CheckpointManifest& m, bool snapshot);

// Fills `out` with n elements of array `a` (0 p, 1 m, 2 v) from the
// owned-relative `offset`.
using ArraySource =
    std::function<absl::Status(int a, uint64_t offset, uint64_t n, float* out)>;
// Receives n elements of array `a` for the owned-relative `offset`.
using ArraySink = std::function<absl::Status(int a, uint64_t offset, uint64_t n,
                                             const float* data)>;

// Phase 1: writes root/step-S/shard-k-of-K.ckpt (S = header.step; with
// `snapshot`, snapshot-k-of-K.ckpt) with header.length elements per array
// from `source`.
absl::StatusOr<v1::CheckpointShard> WriteShardFile(
    Env* env, const std::string& root, const v1::ShardCheckpointHeader& header,
    const ArraySource& source, bool snapshot = false);

// Phase 2: writes root/step-S/MANIFEST. INVALID_ARGUMENT unless it lists
// every shard of manifest.spec().num_servers() exactly once.
absl::Status WriteManifest(Env* env, const std::string& root,
                           const v1::CheckpointManifest& manifest);

// Removes complete checkpoint `manifest` from root: its MANIFEST first (so
// that it is no longer complete), then the shard files it names (some
// may be gone: another server sharing the directory removed them) and the
// temporary files a writer killed mid-write left of its files
// ("<name>.tmp-<pid>-<n>"), then the step directory if nothing else (a
// snapshot) is left in it. Returns whether the directory is gone.
absl::StatusOr<bool> RemoveCheckpoint(Env* env, const std::string& root,
                                      const v1::CheckpointManifest& manifest);

// Removes an abandoned checkpoint attempt, step directory `step` without a
// MANIFEST (its writers died or the step was never finalized): its shard
// files and temporary files, then the directory if nothing else is left.
// Only for a step older than a complete checkpoint: no server still
// writes it. Returns whether the directory is gone.
absl::StatusOr<bool> RemoveAbandoned(Env* env, const std::string& root,
                                     uint64_t step);

// Shutdown snapshots: what a server stopped gracefully (SIGTERM) writes
// alone, without the other servers — shard k's state at its last committed
// step S in step-S/snapshot-k-of-K.ckpt (its own file: a snapshot never
// writes a file a checkpoint's MANIFEST names, issue 23), plus
// step-S/SNAPSHOT-k-of-K, a MANIFEST that lists that one file, written
// last (the commit point; an older SNAPSHOT-k-of-K is removed first). A
// snapshot is not a checkpoint (restore and ListCheckpoints ignore it);
// the server that wrote it loads it at its next start when it is newer
// than every complete checkpoint, and removes both files then.
// "SNAPSHOT-00001-of-00003".
std::string SnapshotName(uint32_t shard, uint32_t num_shards);

// INVALID_ARGUMENT unless the manifest lists exactly one shard of its plan.
absl::Status WriteSnapshotManifest(Env* env, const std::string& root,
                                   const v1::CheckpointManifest& manifest);

struct Snapshot {
  std::string path;                 // of the SNAPSHOT file
  std::string data_path;            // of its snapshot-k-of-K.ckpt
  v1::CheckpointManifest manifest;  // when error is OK
  absl::Status error;               // DATA_LOSS for a damaged one
};
// The snapshots of shard `shard` of `num_shards` under `root`, newest
// first (a missing root: none).
absl::StatusOr<std::vector<Snapshot>> FindSnapshots(Env* env,
                                                    const std::string& root,
                                                    uint32_t shard,
                                                    uint32_t num_shards);

// Reads shard file `shard` of `step` in root/step-S whole, in order: its
// header (which must match `shard` and `step`), every block (checked
// against its CRC), and its size and file CRC against `shard`'s; hands the
// elements in the absolute range `want` to `sink` (offsets relative to
// want.begin; nothing when `sink` is null). The sink may have been given
// data when an error comes back: load into scratch memory.
absl::Status ReadShardFile(Env* env, const std::string& root, uint64_t step,
                           const v1::CheckpointShard& shard, Range want,
                           const ArraySink* sink);
// The header of the shard file `name` of `step` (magic and header CRC
// checked; not the payload).
absl::StatusOr<v1::ShardCheckpointHeader> ReadShardHeader(
    Env* env, const std::string& root, uint64_t step, const std::string& name);

struct Listing {
  std::vector<v1::CheckpointManifest> complete;  // newest first
  std::vector<std::string> skipped;              // "step-...: why", per dir
  std::vector<uint64_t> incomplete;  // steps of dirs without a MANIFEST
  // The steps skipped for damage (not merely incomplete) and why.
  std::vector<std::pair<uint64_t, absl::Status>> damaged;
};
// The checkpoints under `root` (a missing root lists nothing). A step
// directory that is a link, or whose MANIFEST is damaged or names files
// the server would not, is skipped as damaged.
absl::StatusOr<Listing> ListCheckpoints(Env* env, const std::string& root);

// Reads the flat range `want` (absolute; any plan) of p, m, v from the
// shard files of `manifest` that overlap it (ReadShardFile: each checked
// whole) and hands it to `sink` with offsets relative to want.begin.
// `snapshot`: the manifest is a shutdown snapshot's.
absl::Status LoadRange(Env* env, const std::string& root,
                       const v1::CheckpointManifest& manifest, Range want,
                       const ArraySink& sink, bool snapshot = false);

}  // namespace checkpoint
}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_CHECKPOINT_CHECKPOINT_FILES_H_
