// Byte-level tokenization: any file becomes an llm.c token file whose
// tokens are its bytes (token = byte value, a vocabulary of 256), so a
// model can be trained on one's own text with nothing to download. Use a
// GPT-2 config with vocab_size >= 256.
//
// With val_fraction f > 0 the last round(f * size) bytes go to a second
// token file (validation) and the rest to the first; both must be
// non-empty. The input is streamed in 1 MiB chunks; outputs are written
// atomically (temporary file, then rename). All I/O goes through a
// Env (DefaultEnv() unless a test passes one).
//
// Errors: INVALID_ARGUMENT for bad options (naming the flag-like field),
// an empty input, or a part larger than a token file holds (INT32_MAX
// tokens); NOT_FOUND for a missing input; the Env's error for I/O.
//
// Threading: TokenizeFile may run on several threads for distinct files;
// `progress` is called on the calling thread.
#ifndef ZEROSHARD_WORKER_IO_BYTE_TOKENIZER_H_
#define ZEROSHARD_WORKER_IO_BYTE_TOKENIZER_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "common/env/env.h"

namespace zeroshard::io {

inline constexpr int kByteVocabSize = 256;

struct TokenizeOptions {
  std::string input;
  std::string output;
  double val_fraction = 0.0;  // in [0, 1)
  std::string val_output;     // required iff val_fraction > 0
  // Called after each chunk with (bytes done, bytes total); may be empty.
  std::function<void(uint64_t, uint64_t)> progress;
};

struct TokenizeSummary {
  int64_t input_bytes = 0;
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
};

// OK, or INVALID_ARGUMENT naming the flag (--input, --val_fraction, ...)
// that is missing or inconsistent, or an output that is the input or the
// other output (the same file under any name, io/same_file.h; checked on
// the real file system). TokenizeFile checks this first.
absl::Status ValidateTokenizeOptions(const TokenizeOptions& options);

absl::StatusOr<TokenizeSummary> TokenizeFile(const TokenizeOptions& options,
                                             Env* env = DefaultEnv());

}  // namespace zeroshard::io

#endif  // ZEROSHARD_WORKER_IO_BYTE_TOKENIZER_H_
