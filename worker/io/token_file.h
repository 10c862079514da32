// Token files in llm.c's format: a 256 x int32 header ([0] magic 20240520,
// [1] version 1, [2] token count N, the rest 0) followed by N uint16
// tokens, little-endian, nothing after them. A file holds 1..INT32_MAX
// tokens.
//
// I/O goes through a Env (common/env; DefaultEnv() unless a test
// passes a MemEnv or FaultEnv).
//
// Errors (every message names the file):
//   NOT_FOUND         the file does not exist;
//   INVALID_ARGUMENT  wrong magic, unsupported version, a token count <= 0,
//                     a token id >= vocab_size (naming index and id);
//   DATA_LOSS         shorter than the header, or a length other than
//                     1024 + 2 N bytes (truncated or trailing bytes);
//   others            the Env's error of a failed open/read/write/rename.
// Writers write to a temporary file and rename it into place on Commit
// (AtomicFileWriter), so a failed or abandoned write leaves `path`
// as it was.
//
// Threading: a TokenFile may be read from several threads at once
// (positional reads); a TokenFileWriter is used by one thread.
#ifndef ZEROSHARD_WORKER_IO_TOKEN_FILE_H_
#define ZEROSHARD_WORKER_IO_TOKEN_FILE_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/env/env.h"
#include "common/env/files.h"

namespace zeroshard::io {

inline constexpr int32_t kTokenMagic = 20240520;
inline constexpr int32_t kTokenVersion = 1;
inline constexpr int64_t kMaxTokensPerFile =
    std::numeric_limits<int32_t>::max();

// OK if every tokens[i] < vocab_size, else INVALID_ARGUMENT
// "<path>: token <id> at index <first_index + i> is not below vocab_size
// <V>". vocab_size must be positive.
absl::Status CheckTokenIds(const std::string& path, const uint16_t* tokens,
                           size_t n, int64_t vocab_size,
                           int64_t first_index = 0);

// An open token file whose header and length have been checked.
class TokenFile {
 public:
  static absl::StatusOr<TokenFile> Open(const std::string& path,
                                        Env* env = DefaultEnv());

  const std::string& path() const { return file_.path(); }
  int64_t num_tokens() const { return num_tokens_; }

  // Reads tokens [first, first + n) into dst. Requires
  // 0 <= first <= first + n <= num_tokens() (else OUT_OF_RANGE).
  absl::Status Read(int64_t first, size_t n, uint16_t* dst) const;

  // Scans the whole file (in bounded chunks) for ids >= vocab_size.
  absl::Status CheckIds(int64_t vocab_size) const;

 private:
  TokenFile(ReadOnlyFile file, int64_t n)
      : file_(std::move(file)), num_tokens_(n) {}
  ReadOnlyFile file_;
  int64_t num_tokens_ = 0;
};

// Reads a whole token file; with vocab_size > 0 also checks the ids.
absl::StatusOr<std::vector<uint16_t>> ReadTokenFile(const std::string& path,
                                                    int64_t vocab_size = 0,
                                                    Env* env = DefaultEnv());

// Writes `tokens` as a token file (1 <= size <= kMaxTokensPerFile).
absl::Status WriteTokenFile(const std::string& path,
                            const std::vector<uint16_t>& tokens,
                            Env* env = DefaultEnv());

// Streams a token file whose length is known up front.
//
//   ZS_ASSIGN_OR_RETURN(auto w, TokenFileWriter::Create(path, n));
//   ZS_RETURN_IF_ERROR(w.Append(chunk, k));  // ... until n tokens
//   ZS_RETURN_IF_ERROR(w.Commit());
class TokenFileWriter {
 public:
  // INVALID_ARGUMENT unless 1 <= num_tokens <= kMaxTokensPerFile.
  static absl::StatusOr<TokenFileWriter> Create(const std::string& path,
                                                int64_t num_tokens,
                                                Env* env = DefaultEnv());

  // FAILED_PRECONDITION if this would exceed the declared count.
  absl::Status Append(const uint16_t* tokens, size_t n);
  // FAILED_PRECONDITION unless exactly the declared count was appended.
  absl::Status Commit();

  int64_t appended() const { return appended_; }

 private:
  TokenFileWriter(AtomicFileWriter out, int64_t n)
      : out_(std::move(out)), num_tokens_(n) {}
  AtomicFileWriter out_;
  int64_t num_tokens_ = 0;
  int64_t appended_ = 0;
};

}  // namespace zeroshard::io

#endif  // ZEROSHARD_WORKER_IO_TOKEN_FILE_H_
