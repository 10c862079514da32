// zeroshard-ctl list: what a checkpoint directory holds, read from disk
// with no server running (server/checkpoint/checkpoint_files.h): each
// complete checkpoint, newest first (step, shards, bytes, tag, the
// workers' state and the run that recorded it), the step directories that
// are incomplete (no MANIFEST: a checkpoint cut short) or damaged (and
// why), the servers' shutdown snapshots, and the checkpoint a job started
// on it restores. With `verify`, every shard file of every complete
// checkpoint is read whole: each block's CRC-32C, and the file's size and
// CRC-32C against its MANIFEST; a file that fails makes its checkpoint
// damaged.
//
// Thread-compatible. Errors: the Env's, for a root that cannot be read
// (a missing root lists nothing).
#ifndef ZEROSHARD_CTL_CHECKPOINT_LIST_H_
#define ZEROSHARD_CTL_CHECKPOINT_LIST_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/env/env.h"

namespace zeroshard::ctl {

struct CheckpointList {
  std::string text;  // the report, one item per line
  int complete = 0;  // complete checkpoints that passed what was checked
  int damaged = 0;   // damaged step directories and failed verifications
};

absl::StatusOr<CheckpointList> ListCheckpointDir(Env* env,
                                                 const std::string& root,
                                                 bool verify);

}  // namespace zeroshard::ctl

#endif  // ZEROSHARD_CTL_CHECKPOINT_LIST_H_
