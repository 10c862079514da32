// How zeroshard-ctl prints what a trainer state records of the run that
// wrote it (TrainerState world_size .. data; worker/train/run_changes.h).
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

}  // namespace zeroshard::ctl

#endif  // ZEROSHARD_CTL_STATE_TEXT_H_
