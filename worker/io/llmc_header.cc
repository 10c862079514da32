#include "worker/io/llmc_header.h"

#include "absl/strings/str_cat.h"

namespace zeroshard::io {

absl::StatusOr<FileHeader> ReadHeader(const ReadOnlyFile& file, int32_t magic,
                                      const char* kind) {
  if (file.size() < kHeaderBytes) {
    return absl::DataLossError(absl::StrCat(
        file.path(), ": truncated: ", file.size(), " bytes, shorter than the ",
        kHeaderBytes, "-byte header of an ", kind));
  }
  FileHeader header;
  if (absl::Status s = file.Read(0, header.data(), kHeaderBytes); !s.ok()) {
    return s;
  }
  if (header[0] != magic) {
    return absl::InvalidArgumentError(absl::StrCat(file.path(), ": bad magic ",
                                                   header[0], " (expected ",
                                                   magic, "): not an ", kind));
  }
  return header;
}

absl::Status CheckFileSize(const ReadOnlyFile& file, uint64_t expected,
                           const std::string& why) {
  if (file.size() < expected) {
    return absl::DataLossError(
        absl::StrCat(file.path(), ": truncated: ", file.size(),
                     " bytes, but the ", why, " needs ", expected));
  }
  if (file.size() > expected) {
    return absl::DataLossError(
        absl::StrCat(file.path(), ": ", file.size() - expected,
                     " unexpected trailing bytes: ", file.size(),
                     " bytes, but the ", why, " needs ", expected));
  }
  return absl::OkStatus();
}

}  // namespace zeroshard::io
