// ArrayFile: one state array (p, m, v, serve or grad) in one file, as
// checksummed chunks of block_size bytes (format in manifest.h), with the
// CRC table held in RAM (4 bytes per chunk) and persisted by the manifest.
//
// Chunk I/O is synchronous here (the step pipeline issues its own
// asynchronous requests from chunk_offset/chunk_len and calls
// Verify/Record). Element-range helpers read or read-modify-write the
// chunks they touch through a caller-owned scratch chunk buffer.
//
// For the gradient file a chunk may be marked "zero" (ZeroAll): it reads as
// zeros without I/O until written.
//
// Errors: the Env's, and DATA_LOSS "checksum mismatch in <path> chunk j".
// Threading: Read*/Verify are thread-safe; writers of the same chunk are
// serialised by the caller and must not overlap readers of that chunk
// (writers of different chunks may run concurrently; ZeroAll may not).
#ifndef ZEROSHARD_SERVER_STORAGE_ARRAY_FILE_H_
#define ZEROSHARD_SERVER_STORAGE_ARRAY_FILE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/env/env.h"
#include "server/storage/buffer.h"
#include "server/storage/manifest.h"

namespace zeroshard {
namespace storage {

class ArrayFile {
 public:
  // Creates `path` (must not exist): header, space for every chunk
  // (fallocate, so a full device fails here), all chunks zero.
  static absl::StatusOr<std::unique_ptr<ArrayFile>> Create(
      Env* env, const std::string& path, const ArrayHeader& header);
  // Opens an existing file, checking its header and length against
  // `header`, and adopts `crcs` (one per chunk).
  static absl::StatusOr<std::unique_ptr<ArrayFile>> Open(
      Env* env, const std::string& path, const ArrayHeader& header,
      std::vector<uint32_t> crcs);

  File* file() const { return file_.get(); }
  const std::string& path() const { return file_->path(); }
  const ArrayHeader& header() const { return header_; }
  uint32_t elem() const { return ElementBytes(header_.kind); }
  uint64_t chunks() const { return crcs_.size(); }
  uint64_t chunk_len(uint64_t j) const;
  uint64_t chunk_offset(uint64_t j) const {
    return kHeaderBytes + j * header_.block_size;
  }
  // Elements per full chunk.
  uint64_t chunk_elems() const { return header_.block_size / elem(); }
  const std::vector<uint32_t>& crcs() const { return crcs_; }
  bool zero(uint64_t j) const { return !zero_.empty() && zero_[j]; }

  // DATA_LOSS unless `data` (chunk_len(j) bytes) matches chunk j's CRC.
  absl::Status Verify(uint64_t j, const void* data) const;
  // Records the CRC of chunk j as written from `data`; clears its zero mark.
  void Record(uint64_t j, const void* data);
  absl::Status ReadChunk(uint64_t j, void* buf) const;
  absl::Status WriteChunk(uint64_t j, const void* buf);
  // Marks every chunk zero (gradient reset without I/O).
  void ZeroAll();

  // Copies elements [first, first + n) to `out`.
  absl::Status ReadElems(uint64_t first, uint64_t n, void* out,
                         const AlignedBuffer& scratch) const;
  // For each chunk touching [first, first + n): reads it (unless fully
  // covered and `overwrite`), calls fn(chunk elements, first element of the
  // chunk, [lo, hi) chunk-relative range to change), rewrites it.
  using EditFn = std::function<void(char* chunk, uint64_t chunk_first,
                                    uint64_t lo, uint64_t hi)>;
  absl::Status EditElems(uint64_t first, uint64_t n, bool overwrite,
                         const AlignedBuffer& scratch, const EditFn& fn);

 private:
  ArrayFile(std::unique_ptr<File> file, const ArrayHeader& header);

  std::unique_ptr<File> file_;
  ArrayHeader header_;
  uint64_t data_bytes_;  // padded to kIoAlign
  std::vector<uint32_t> crcs_;
  // Bytes, not bits: writers of different chunks mark them concurrently.
  std::vector<uint8_t> zero_;
};

// Bytes the elements of an array take on disk (padded) and its chunk count.
uint64_t PaddedBytes(uint64_t size, uint32_t elem);
uint64_t ChunkCount(uint64_t size, uint32_t elem, uint64_t block_size);

}  // namespace storage
}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_STORAGE_ARRAY_FILE_H_
