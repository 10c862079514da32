// FileGradWriter: NvmeTier's GradWriter for a gradient file (ArrayFile of
// fp32) — one push stream's range written at the device's sequential
// bandwidth instead of one synchronous read-modify-write per pushed chunk.
//
// Appended elements are staged in chunk-aligned buffers. A file chunk the
// range covers entirely is written whole, with no read, once its last
// element arrives: `batch_chunks` such chunks go to the IoEngine as one
// batch while the next batch is staged in a second buffer (two batches at
// most in flight per writer). A chunk the range covers only partly (at
// most the first and the last: neighbouring streams share them) is read,
// edited and rewritten synchronously under `*edge_mu`, so concurrent
// writers of neighbouring ranges never lose each other's elements. CRCs
// are recorded once a chunk's write has completed.
//
// Memory: 2 × min(batch_chunks, chunks the range touches) × block_size,
// plus one block_size scratch chunk once the range has a partial chunk,
// counted in `account`.
//
// Errors: INVALID_ARGUMENT for elements past the range or a short Finish;
// the Env's for I/O (the writer then fails every later call; chunks being
// written may hold a mix of old and new bytes and fail their CRC check
// until rewritten, as with ArrayFile::WriteChunk).
// Threading: one thread per writer; writers of disjoint ranges of one file
// may run concurrently (nothing else may write the file meanwhile).
#ifndef ZEROSHARD_SERVER_STORAGE_GRAD_WRITER_H_
#define ZEROSHARD_SERVER_STORAGE_GRAD_WRITER_H_

#include <array>
#include <cstdint>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "server/storage/array_file.h"
#include "server/storage/buffer.h"
#include "server/storage/io_engine.h"
#include "server/storage/tier.h"

namespace zeroshard {
namespace storage {

class FileGradWriter : public GradWriter {
 public:
  // Overwrites elements [first, first + n) of `file` (inside it). The
  // file, engine, mutex and account must outlive the writer.
  FileGradWriter(ArrayFile* file, IoEngine* engine, absl::Mutex* edge_mu,
                 MemoryAccount* account, uint64_t first, uint64_t n,
                 int batch_chunks);
  ~FileGradWriter() override;

  absl::Status Append(const float* data, uint64_t count) override;
  absl::Status Finish() override;

 private:
  struct Stage {
    AlignedBuffer buf;             // up to batch_chunks_ chunks
    std::vector<uint64_t> chunks;  // file chunk of each staged slot
    IoBatch batch;
    bool in_flight = false;
  };
  // Chunk j, staged at `slot` of the current stage, holds all of this
  // range's elements: write it whole or edit it in place.
  absl::Status ChunkDone(uint64_t j, char* slot);
  absl::Status EditEdge(uint64_t j, const char* slot, uint64_t lo, uint64_t hi);
  void Submit(Stage& s);
  absl::Status Drain(Stage& s);  // waits, records the CRCs

  ArrayFile* const file_;
  IoEngine* const engine_;
  absl::Mutex* const edge_mu_;
  MemoryAccount* const account_;
  const uint64_t first_, end_, per_;
  const int batch_chunks_;
  uint64_t next_;
  std::array<Stage, 2> stages_;
  int cur_ = 0;
  AlignedBuffer scratch_;  // edge read-modify-write, allocated on first use
  absl::Status failed_;
};

}  // namespace storage
}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_STORAGE_GRAD_WRITER_H_
