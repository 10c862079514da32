// Batches of (inputs, targets) from one or more llm.c token files, split
// deterministically between the ranks of a data-parallel job; the idea of
// llm.c's DataLoader.
//
// The shards are read in order, each from its start, and the stream loops
// forever (one pass over all shards is an epoch). A *step* takes W*B*T
// consecutive tokens (plus one) of the current shard at `offset`: rank r
// reads tokens [offset + r*B*T, offset + (r+1)*B*T + 1) and returns
//   inputs[i]  = tokens[offset + r*B*T + i]       i in [0, B*T)
//   targets[i] = tokens[offset + r*B*T + i + 1]
// as B rows of T. The ranks' batches are disjoint (they share only the one
// target token at a boundary) and together cover the step. The next step
// starts W*B*T tokens further on; when the shard cannot hold another full
// step (W*B*T + 1 tokens), the loader moves to the next shard at offset 0,
// and after the last shard back to the first with epoch + 1. The tail of a
// shard shorter than a step is never used. There is no shuffling: shuffle
// documents when making the shards.
//
// The position (epoch, shard, offset) of the next step is the same on every
// rank and is all there is to save: a loader of the same files and
// geometry restored to it with Seek() yields exactly the batches the saved
// one would have. It serialises as "epoch=E shard=S offset=O".
//
// Open() checks everything up front: the files exist and are valid token
// files, every token id is below vocab_size (the whole data set is read
// once, in bounded chunks; errors name the file, the index and the id), and
// every shard holds at least one step (W*B*T + 1 tokens). Next() reads one
// batch with a single positional read. Files are opened and patterns
// expanded through a Env (DefaultEnv() unless a test passes one).
//
// Threading: a DataLoader is used by one thread at a time.
#ifndef ZEROSHARD_WORKER_IO_DATA_LOADER_H_
#define ZEROSHARD_WORKER_IO_DATA_LOADER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/env/env.h"
#include "worker/io/token_file.h"

namespace zeroshard::io {

struct DataLoaderOptions {
  // Token files or glob patterns ("data/train_*.bin"), used in the order
  // given; each pattern's matches in sorted order. A pattern that matches
  // nothing is NOT_FOUND.
  std::vector<std::string> files;
  int batch_size = 0;  // B
  int seq_len = 0;     // T
  int rank = 0;        // r in [0, world_size)
  int world_size = 1;  // W
  int vocab_size = 0;  // every token id must be below it
};

struct LoaderPosition {
  int64_t epoch = 0;
  int64_t shard = 0;   // index into DataLoader::files()
  int64_t offset = 0;  // first token of the next step in that shard

  bool operator==(const LoaderPosition& o) const {
    return epoch == o.epoch && shard == o.shard && offset == o.offset;
  }
  // "epoch=0 shard=1 offset=4096".
  std::string ToString() const;
  // Parses ToString()'s form; INVALID_ARGUMENT otherwise.
  static absl::StatusOr<LoaderPosition> Parse(absl::string_view text);
};

// Expands `patterns` as DataLoaderOptions::files describes. A pattern with
// no glob characters is kept as is (its absence is reported on open).
absl::StatusOr<std::vector<std::string>> ExpandFilePatterns(
    const std::vector<std::string>& patterns, Env* env = DefaultEnv());

// Everything DataLoader::Open checks (options, files, one step per shard,
// every id below vocab_size; a linear pass over the data), without keeping
// a loader: for a launcher, or a worker before it contacts anyone. OK or
// Open's error, one line naming the file and the problem.
absl::Status CheckTrainingData(const DataLoaderOptions& options,
                               Env* env = DefaultEnv());

class DataLoader {
 public:
  // Errors: INVALID_ARGUMENT for bad options (naming the field) or a bad
  // file (see token_file.h), NOT_FOUND for a missing file or a pattern
  // without matches, DATA_LOSS for a corrupt file, INVALID_ARGUMENT for a
  // shard shorter than one step.
  // `env` must outlive the loader.
  static absl::StatusOr<DataLoader> Open(const DataLoaderOptions& options,
                                         Env* env = DefaultEnv());

  // Fills inputs and targets (B*T each, row-major (B, T)) with this rank's
  // batch of the current step and advances to the next step. On error the
  // position is unchanged.
  absl::Status Next(int32_t* inputs, int32_t* targets);

  // The position of the next step.
  const LoaderPosition& position() const { return position_; }
  // Moves to `position`: INVALID_ARGUMENT unless epoch >= 0, shard indexes
  // a file, and a whole step fits at offset in that shard.
  absl::Status Seek(const LoaderPosition& position);

  const std::vector<std::string>& files() const { return paths_; }
  const DataLoaderOptions& options() const { return options_; }
  int64_t tokens_per_batch() const { return batch_tokens_; }  // B*T
  // Steps in one epoch (sum over shards of full steps from offset 0).
  int64_t steps_per_epoch() const { return steps_per_epoch_; }

 private:
  DataLoader() = default;
  bool StepFits(int64_t shard, int64_t offset) const;

  DataLoaderOptions options_;
  std::vector<std::string> paths_;
  std::vector<TokenFile> shards_;
  int64_t batch_tokens_ = 0;  // B*T
  int64_t step_tokens_ = 0;   // W*B*T
  int64_t steps_per_epoch_ = 0;
  LoaderPosition position_;
  std::vector<uint16_t> buffer_;  // B*T + 1
};

}  // namespace zeroshard::io

#endif  // ZEROSHARD_WORKER_IO_DATA_LOADER_H_
