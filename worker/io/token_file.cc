#include "worker/io/token_file.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/io/llmc_header.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "llm.c files are little-endian; this reader assumes the host is");

namespace zeroshard::io {
namespace {

// Tokens per chunk when scanning a file (2 MiB).
constexpr size_t kScanChunk = size_t{1} << 20;

}  // namespace

absl::Status CheckTokenIds(const std::string& path, const uint16_t* tokens,
                           size_t n, int64_t vocab_size, int64_t first_index) {
  if (vocab_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": vocab_size must be positive to check tokens, got ",
        vocab_size));
  }
  if (vocab_size > std::numeric_limits<uint16_t>::max()) {
    return absl::OkStatus();  // every uint16 is a valid id
  }
  const uint16_t limit = static_cast<uint16_t>(vocab_size);
  for (size_t i = 0; i < n; ++i) {
    if (tokens[i] >= limit) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": token ", tokens[i], " at index ",
                       first_index + static_cast<int64_t>(i),
                       " is not below vocab_size ", vocab_size));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<TokenFile> TokenFile::Open(const std::string& path, Env* env) {
  ZS_ASSIGN_OR_RETURN(ReadOnlyFile file, ReadOnlyFile::Open(env, path));
  ZS_ASSIGN_OR_RETURN(FileHeader h,
                      ReadHeader(file, kTokenMagic, "llm.c token file"));
  if (h[1] != kTokenVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": unsupported token file version ", h[1],
                     " (zeroshard reads version 1: uint16 tokens)"));
  }
  if (h[2] <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": header token count is ", h[2], " (a token file holds >= 1)"));
  }
  const int64_t n = h[2];
  ZS_RETURN_IF_ERROR(CheckFileSize(
      file, kHeaderBytes + static_cast<uint64_t>(n) * sizeof(uint16_t),
      absl::StrCat("header (", n, " tokens)")));
  return TokenFile(std::move(file), n);
}

absl::Status TokenFile::Read(int64_t first, size_t n, uint16_t* dst) const {
  if (first < 0 || first > num_tokens_ ||
      static_cast<int64_t>(n) > num_tokens_ - first) {
    return absl::OutOfRangeError(
        absl::StrCat(path(), ": tokens [", first, ", ", first + n,
                     ") are outside the file's ", num_tokens_));
  }
  return file_.Read(kHeaderBytes + static_cast<uint64_t>(first) * 2, dst,
                    n * 2);
}

absl::Status TokenFile::CheckIds(int64_t vocab_size) const {
  std::vector<uint16_t> chunk(std::min<int64_t>(kScanChunk, num_tokens_));
  for (int64_t first = 0; first < num_tokens_;) {
    const size_t n = std::min<int64_t>(chunk.size(), num_tokens_ - first);
    ZS_RETURN_IF_ERROR(Read(first, n, chunk.data()));
    ZS_RETURN_IF_ERROR(
        CheckTokenIds(path(), chunk.data(), n, vocab_size, first));
    first += static_cast<int64_t>(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint16_t>> ReadTokenFile(const std::string& path,
                                                    int64_t vocab_size,
                                                    Env* env) {
  ZS_ASSIGN_OR_RETURN(TokenFile file, TokenFile::Open(path, env));
  std::vector<uint16_t> tokens(file.num_tokens());
  ZS_RETURN_IF_ERROR(file.Read(0, tokens.size(), tokens.data()));
  if (vocab_size > 0) {
    ZS_RETURN_IF_ERROR(
        CheckTokenIds(path, tokens.data(), tokens.size(), vocab_size));
  }
  return tokens;
}

absl::Status WriteTokenFile(const std::string& path,
                            const std::vector<uint16_t>& tokens, Env* env) {
  ZS_ASSIGN_OR_RETURN(
      TokenFileWriter w,
      TokenFileWriter::Create(path, static_cast<int64_t>(tokens.size()), env));
  ZS_RETURN_IF_ERROR(w.Append(tokens.data(), tokens.size()));
  return w.Commit();
}

absl::StatusOr<TokenFileWriter> TokenFileWriter::Create(const std::string& path,
                                                        int64_t num_tokens,
                                                        Env* env) {
  if (num_tokens < 1 || num_tokens > kMaxTokensPerFile) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot write ", num_tokens,
                     " tokens: a token file holds 1 to ", kMaxTokensPerFile));
  }
  FileHeader h{};
  h[0] = kTokenMagic;
  h[1] = kTokenVersion;
  h[2] = static_cast<int32_t>(num_tokens);
  ZS_ASSIGN_OR_RETURN(AtomicFileWriter out,
                      AtomicFileWriter::Create(env, path));
  ZS_RETURN_IF_ERROR(out.Append(h.data(), kHeaderBytes));
  return TokenFileWriter(std::move(out), num_tokens);
}

absl::Status TokenFileWriter::Append(const uint16_t* tokens, size_t n) {
  if (static_cast<int64_t>(n) > num_tokens_ - appended_) {
    return absl::FailedPreconditionError(
        absl::StrCat(out_.path(), ": appending ", n, " tokens after ",
                     appended_, " exceeds the declared ", num_tokens_));
  }
  ZS_RETURN_IF_ERROR(out_.Append(tokens, n * sizeof(uint16_t)));
  appended_ += static_cast<int64_t>(n);
  return absl::OkStatus();
}

absl::Status TokenFileWriter::Commit() {
  if (appended_ != num_tokens_) {
    return absl::FailedPreconditionError(
        absl::StrCat(out_.path(), ": ", appended_, " tokens appended, but ",
                     num_tokens_, " declared"));
  }
  return out_.Commit();
}

}  // namespace zeroshard::io
