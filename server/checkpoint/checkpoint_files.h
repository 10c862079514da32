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
// file.
//
// Errors: DATA_LOSS (naming the file and the block) for a checksum
// mismatch, truncation or bad magic; the Env's codes for I/O.
// Threading: the functions are thread-safe; a ShardFileReader is used by
// one thread at a time.
#ifndef ZEROSHARD_SERVER_CHECKPOINT_CHECKPOINT_FILES_H_
#define ZEROSHARD_SERVER_CHECKPOINT_CHECKPOINT_FILES_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
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

// Fills `out` with n elements of array `a` (0 p, 1 m, 2 v) from the
// owned-relative `offset`.
using ArraySource =
    std::function<absl::Status(int a, uint64_t offset, uint64_t n, float* out)>;
// Receives n elements of array `a` for the owned-relative `offset`.
using ArraySink = std::function<absl::Status(int a, uint64_t offset, uint64_t n,
                                             const float* data)>;

// Phase 1: writes root/step-S/shard-k-of-K.ckpt (S = header.step) with
// header.length elements per array from `source`.
absl::StatusOr<v1::CheckpointShard> WriteShardFile(
    Env* env, const std::string& root, const v1::ShardCheckpointHeader& header,
    const ArraySource& source);

// Phase 2: writes root/step-S/MANIFEST. INVALID_ARGUMENT unless it lists
// every shard of manifest.spec().num_servers() exactly once.
absl::Status WriteManifest(Env* env, const std::string& root,
                           const v1::CheckpointManifest& manifest);

// Shutdown snapshots: what a server stopped gracefully (SIGTERM) writes
// alone, without the other servers — shard k's file of its last committed
// step S as phase 1 writes it, plus step-S/SNAPSHOT-k-of-K, a MANIFEST
// that lists that one shard. A snapshot is not a checkpoint (restore and
// ListCheckpoints ignore it); the server that wrote it loads it at its
// next start when it is newer than every complete checkpoint, and removes
// it once loaded. "SNAPSHOT-00001-of-00003".
std::string SnapshotName(uint32_t shard, uint32_t num_shards);

// INVALID_ARGUMENT unless the manifest lists exactly one shard of its plan.
absl::Status WriteSnapshotManifest(Env* env, const std::string& root,
                                   const v1::CheckpointManifest& manifest);

struct Snapshot {
  std::string path;                 // of the SNAPSHOT file
  v1::CheckpointManifest manifest;  // when error is OK
  absl::Status error;               // DATA_LOSS for a damaged one
};
// The snapshots of shard `shard` of `num_shards` under `root`, newest
// first (a missing root: none).
absl::StatusOr<std::vector<Snapshot>> FindSnapshots(Env* env,
                                                    const std::string& root,
                                                    uint32_t shard,
                                                    uint32_t num_shards);

class ShardFileReader {
 public:
  // Opens and checks the magic and the header's checksum.
  static absl::StatusOr<std::unique_ptr<ShardFileReader>> Open(
      Env* env, const std::string& path);

  const v1::ShardCheckpointHeader& header() const { return header_; }
  // n elements of array `a` at owned-relative `offset`; every block read is
  // checked.
  absl::Status Read(int a, uint64_t offset, uint64_t n, float* out);

 private:
  ShardFileReader() = default;
  std::unique_ptr<File> file_;
  v1::ShardCheckpointHeader header_;
  uint64_t payload_start_ = 0;
  std::vector<char> block_;
};

struct Listing {
  std::vector<v1::CheckpointManifest> complete;  // newest first
  std::vector<std::string> skipped;              // "step-...: why", per dir
};
// The checkpoints under `root` (a missing root lists nothing).
absl::StatusOr<Listing> ListCheckpoints(Env* env, const std::string& root);

// Reads the flat range `want` (absolute; any plan) of p, m, v from the
// shard files of `manifest` that overlap it and hands it to `sink` with
// offsets relative to want.begin. Every block read is checked: DATA_LOSS
// names the file and block.
absl::Status LoadRange(Env* env, const std::string& root,
                       const v1::CheckpointManifest& manifest, Range want,
                       const ArraySink& sink);

}  // namespace checkpoint
}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_CHECKPOINT_CHECKPOINT_FILES_H_
