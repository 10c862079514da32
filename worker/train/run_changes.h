// What differs between the run that recorded a trainer state (a
// checkpoint's, or the servers' last commit) and the run that continues
// from it, for the line a resumed job prints: a changed config or command
// line is then said, not silently applied. Nothing here refuses a change
// (a new learning rate or more workers are what a resume is often for);
// the data position (epoch, shard, token offset) carries over to whatever
// geometry and files the new run has.
//
// Pure functions; thread-compatible.
#ifndef ZEROSHARD_WORKER_TRAIN_RUN_CHANGES_H_
#define ZEROSHARD_WORKER_TRAIN_RUN_CHANGES_H_

#include <string>
#include <vector>

#include "proto/zeroshard.pb.h"

namespace zeroshard::train {

// What TrainerState.data records for the run's data files as given:
// them comma-joined, or where that is longer than kMaxDataRecord (the
// state travels with every commit) "<count> files (<first> .. <last>),
// crc32c <of the joined list>".
inline constexpr size_t kMaxDataRecord = 256;
std::string DataRecord(const std::vector<std::string>& files);

struct RunChangeList {
  // One entry per difference, e.g. "lr 0.003 -> 0.001", "workers 2 -> 4",
  // "data a.bin -> b.bin", in a fixed order: workers, micro batch,
  // sequence length, gradient accumulation, lr, data, seed (the seed only
  // where both runs train on synthetic tokens, which it draws).
  std::vector<std::string> changes;
  // The batches' geometry or the files changed: the same data position
  // now means other batches.
  bool batches_differ = false;
};

// Empty when `then` did not record its run (world_size 0: an older
// build's or a C API caller's state) or nothing changed.
RunChangeList RunChanges(const v1::TrainerState& then,
                         const v1::TrainerState& now);

// The line for `c`, `then` being the state recorded ("" when nothing
// changed): "changed since the state of step 6 was recorded: lr 0.003 ->
// 0.001; workers 2 -> 4 (the data continue from the same position: epoch
// 0, shard 0, token offset 384)" — the parenthesis where batches_differ.
std::string DescribeRunChanges(const RunChangeList& c,
                               const v1::TrainerState& then);

}  // namespace zeroshard::train

#endif  // ZEROSHARD_WORKER_TRAIN_RUN_CHANGES_H_
