// How zeroshard-ctl prints a trainer state and what it records of the run
// that wrote it (TrainerState world_size .. data; worker/train/
// run_changes.h).
// Pure; thread-compatible.
#ifndef ZEROSHARD_CTL_STATE_TEXT_H_
#define ZEROSHARD_CTL_STATE_TEXT_H_

#include <string>

#include "proto/zeroshard.pb.h"

namespace zeroshard::ctl {

// "; recorded by a run of 2 workers (micro batch 2, sequence length 16,
// gradient accumulation 1, lr 0.003, data tokens.bin)", or "" when the
// state records no run (an older build's, or a C API caller's).
std::string RecordedRun(const v1::TrainerState& state);

// The whole state as restore and list print it: "step 3, updates 3,
// loss_scale 1, data epoch 0 shard 0 offset 96, seed 1" and RecordedRun.
std::string TrainerStateText(const v1::TrainerState& state);

}  // namespace zeroshard::ctl

#endif  // ZEROSHARD_CTL_STATE_TEXT_H_
