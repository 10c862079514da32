#include "worker/io/byte_tokenizer.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/env/files.h"
#include "common/status_macros.h"
#include "worker/io/same_file.h"
#include "worker/io/token_file.h"

namespace zeroshard::io {

absl::Status ValidateTokenizeOptions(const TokenizeOptions& o) {
  if (o.input.empty()) return absl::InvalidArgumentError("--input is required");
  if (o.output.empty()) {
    return absl::InvalidArgumentError("--output is required");
  }
  if (!(o.val_fraction >= 0.0 && o.val_fraction < 1.0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--val_fraction must be in [0, 1), got %.15g", o.val_fraction));
  }
  if (o.val_fraction > 0.0 && o.val_output.empty()) {
    return absl::InvalidArgumentError(
        "--val_fraction > 0 needs --val_output (where the split goes)");
  }
  if (o.val_fraction == 0.0 && !o.val_output.empty()) {
    return absl::InvalidArgumentError(
        "--val_output needs --val_fraction > 0 (how much to split off)");
  }
  // Writing a part over the input would destroy the corpus (the same
  // file under any name: ./x and x, a hard link, a symlink).
  for (const std::string* part : {&o.output, &o.val_output}) {
    if (SameFile(*part, o.input)) {
      return absl::InvalidArgumentError(
          absl::StrCat(part == &o.output ? "--output " : "--val_output ", *part,
                       " would overwrite --input ", o.input,
                       " (the same file): write the tokens elsewhere"));
    }
  }
  if (SameFile(o.val_output, o.output)) {
    return absl::InvalidArgumentError("--val_output must differ from --output");
  }
  return absl::OkStatus();
}

namespace {

constexpr size_t kChunk = size_t{1} << 20;

// Streams bytes [first, first + n) of `in` into a token file at `path`,
// returned uncommitted so that the caller commits only when every part
// was written.
absl::StatusOr<TokenFileWriter> WritePart(const ReadOnlyFile& in,
                                          uint64_t first, int64_t n,
                                          const std::string& path,
                                          const TokenizeOptions& o, Env* env) {
  ZS_ASSIGN_OR_RETURN(TokenFileWriter out,
                      TokenFileWriter::Create(path, n, env));
  std::vector<uint8_t> bytes(std::min<int64_t>(kChunk, n));
  std::vector<uint16_t> tokens(bytes.size());
  for (int64_t done = 0; done < n;) {
    const size_t k = std::min<int64_t>(bytes.size(), n - done);
    ZS_RETURN_IF_ERROR(in.Read(first + done, bytes.data(), k));
    for (size_t i = 0; i < k; ++i) tokens[i] = bytes[i];
    ZS_RETURN_IF_ERROR(out.Append(tokens.data(), k));
    done += static_cast<int64_t>(k);
    if (o.progress) o.progress(first + done, in.size());
  }
  return out;
}

}  // namespace

absl::StatusOr<TokenizeSummary> TokenizeFile(const TokenizeOptions& o,
                                             Env* env) {
  ZS_RETURN_IF_ERROR(ValidateTokenizeOptions(o));
  ZS_ASSIGN_OR_RETURN(ReadOnlyFile in, ReadOnlyFile::Open(env, o.input));
  const uint64_t size = in.size();
  if (size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(o.input, ": empty file: nothing to tokenize"));
  }
  TokenizeSummary s;
  s.input_bytes = static_cast<int64_t>(size);
  s.val_tokens = static_cast<int64_t>(std::llround(o.val_fraction * size));
  s.train_tokens = s.input_bytes - s.val_tokens;
  if (o.val_fraction > 0.0 && (s.val_tokens == 0 || s.train_tokens == 0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %d bytes cannot be split with --val_fraction=%.15g into two "
        "non-empty parts",
        o.input, static_cast<int64_t>(size), o.val_fraction));
  }
  for (int64_t part : {s.train_tokens, s.val_tokens}) {
    if (part > kMaxTokensPerFile) {
      return absl::InvalidArgumentError(absl::StrCat(
          o.input, ": ", size, " bytes: a part of ", part,
          " tokens exceeds the ", kMaxTokensPerFile,
          " a token file holds; split the input into several files"));
    }
  }
  ZS_ASSIGN_OR_RETURN(TokenFileWriter train,
                      WritePart(in, 0, s.train_tokens, o.output, o, env));
  if (s.val_tokens > 0) {
    ZS_ASSIGN_OR_RETURN(
        TokenFileWriter val,
        WritePart(in, s.train_tokens, s.val_tokens, o.val_output, o, env));
    ZS_RETURN_IF_ERROR(val.Commit());
  }
  ZS_RETURN_IF_ERROR(train.Commit());
  return s;
}

}  // namespace zeroshard::io
