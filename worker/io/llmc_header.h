// llm.c's files (GPT-2 model files, token files) begin with a header of 256
// little-endian int32s: magic, version, then format-specific fields. These
// are the checks every reader of them makes: the magic, and the file's
// length against the one the header implies. The files themselves are read
// and written through common/env (ReadOnlyFile,
// AtomicFileWriter in common/env/files.h).
//
// Errors start with the file's path: DATA_LOSS for a file shorter than the
// header or of another length than expected, INVALID_ARGUMENT for a wrong
// magic.
//
// Threading: stateless functions; safe from any thread.
#ifndef ZEROSHARD_WORKER_IO_LLMC_HEADER_H_
#define ZEROSHARD_WORKER_IO_LLMC_HEADER_H_

#include <array>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/env/files.h"

namespace zeroshard::io {

inline constexpr int kHeaderInts = 256;
inline constexpr uint64_t kHeaderBytes = kHeaderInts * sizeof(int32_t);
using FileHeader = std::array<int32_t, kHeaderInts>;

// Reads the header of `file` and checks its magic. `kind` names the format
// in messages ("llm.c model file"). DATA_LOSS if the file is shorter than
// the header, INVALID_ARGUMENT if header[0] != magic.
absl::StatusOr<FileHeader> ReadHeader(const ReadOnlyFile& file, int32_t magic,
                                      const char* kind);

// OK if the file is exactly `expected` bytes long, else DATA_LOSS saying
// whether it is truncated or has trailing bytes; `why` explains where
// `expected` comes from ("header: 1000 tokens").
absl::Status CheckFileSize(const ReadOnlyFile& file, uint64_t expected,
                           const std::string& why);

}  // namespace zeroshard::io

#endif  // ZEROSHARD_WORKER_IO_LLMC_HEADER_H_
