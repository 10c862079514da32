#include "server/storage/array_file.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/crc32c.h"
#include "common/status_macros.h"

namespace zeroshard {
namespace storage {

uint64_t PaddedBytes(uint64_t size, uint32_t elem) {
  return AlignUp(size * elem, kIoAlign);
}

uint64_t ChunkCount(uint64_t size, uint32_t elem, uint64_t block_size) {
  return (PaddedBytes(size, elem) + block_size - 1) / block_size;
}

ArrayFile::ArrayFile(std::unique_ptr<File> file, const ArrayHeader& header)
    : file_(std::move(file)),
      header_(header),
      data_bytes_(PaddedBytes(header.size, ElementBytes(header.kind))) {}

uint64_t ArrayFile::chunk_len(uint64_t j) const {
  return std::min(header_.block_size, data_bytes_ - j * header_.block_size);
}

absl::StatusOr<std::unique_ptr<ArrayFile>> ArrayFile::Create(
    Env* env, const std::string& path, const ArrayHeader& header) {
  OpenOptions o;
  o.create = true;
  o.exclusive = true;
  o.direct = true;
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<File> f, env->OpenFile(path, o));
  std::unique_ptr<ArrayFile> a(new ArrayFile(std::move(f), header));
  ZS_RETURN_IF_ERROR(a->file_->Allocate(kHeaderBytes + a->data_bytes_));
  AlignedBuffer block(std::max<uint64_t>(kHeaderBytes, header.block_size),
                      nullptr);
  EncodeArrayHeader(header, block.data());
  ZS_RETURN_IF_ERROR(a->file_->Write(0, block.data(), kHeaderBytes));
  std::memset(block.data(), 0, block.size());
  const uint64_t n = ChunkCount(header.size, a->elem(), header.block_size);
  a->crcs_.resize(n);
  for (uint64_t j = 0; j < n; ++j) {
    a->crcs_[j] = Crc32c(block.data(), a->chunk_len(j));
  }
  return a;
}

absl::StatusOr<std::unique_ptr<ArrayFile>> ArrayFile::Open(
    Env* env, const std::string& path, const ArrayHeader& header,
    std::vector<uint32_t> crcs) {
  OpenOptions o;
  o.direct = true;
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<File> f, env->OpenFile(path, o));
  std::unique_ptr<ArrayFile> a(new ArrayFile(std::move(f), header));
  const uint64_t want = ChunkCount(header.size, a->elem(), header.block_size);
  if (crcs.size() != want) {
    return absl::DataLossError(absl::StrCat(path, ": the manifest has ",
                                            crcs.size(), " checksums for ",
                                            want, " chunks"));
  }
  ZS_ASSIGN_OR_RETURN(uint64_t size, a->file_->Size());
  if (size < kHeaderBytes + a->data_bytes_) {
    return absl::DataLossError(absl::StrCat(path, " is truncated: ", size,
                                            " bytes, expected ",
                                            kHeaderBytes + a->data_bytes_));
  }
  AlignedBuffer block(kHeaderBytes, nullptr);
  ZS_RETURN_IF_ERROR(a->file_->Read(0, block.data(), kHeaderBytes));
  ZS_RETURN_IF_ERROR(CheckArrayHeader(block.data(), header, path));
  a->crcs_ = std::move(crcs);
  return a;
}

absl::Status ArrayFile::Verify(uint64_t j, const void* data) const {
  const uint32_t got = Crc32c(data, chunk_len(j));
  if (got != crcs_[j]) {
    const uint64_t at = chunk_offset(j);
    return absl::DataLossError(
        absl::StrCat("checksum mismatch in ", path(), " chunk ", j, " (bytes ",
                     at, "..", at + chunk_len(j), "): the file is corrupt"));
  }
  return absl::OkStatus();
}

void ArrayFile::Record(uint64_t j, const void* data) {
  crcs_[j] = Crc32c(data, chunk_len(j));
  if (!zero_.empty()) zero_[j] = 0;
}

absl::Status ArrayFile::ReadChunk(uint64_t j, void* buf) const {
  if (zero(j)) {
    std::memset(buf, 0, chunk_len(j));
    return absl::OkStatus();
  }
  ZS_RETURN_IF_ERROR(file_->Read(chunk_offset(j), buf, chunk_len(j)));
  return Verify(j, buf);
}

absl::Status ArrayFile::WriteChunk(uint64_t j, const void* buf) {
  ZS_RETURN_IF_ERROR(file_->Write(chunk_offset(j), buf, chunk_len(j)));
  Record(j, buf);
  return absl::OkStatus();
}

void ArrayFile::ZeroAll() { zero_.assign(crcs_.size(), 1); }

absl::Status ArrayFile::ReadElems(uint64_t first, uint64_t n, void* out,
                                  const AlignedBuffer& scratch) const {
  const uint64_t per = chunk_elems();
  char* dst = static_cast<char*>(out);
  for (uint64_t e = first; e < first + n;) {
    const uint64_t j = e / per;
    const uint64_t lo = e - j * per;
    const uint64_t hi = std::min(per, first + n - j * per);
    ZS_RETURN_IF_ERROR(ReadChunk(j, scratch.data()));
    std::memcpy(dst, scratch.data() + lo * elem(), (hi - lo) * elem());
    dst += (hi - lo) * elem();
    e = j * per + hi;
  }
  return absl::OkStatus();
}

absl::Status ArrayFile::EditElems(uint64_t first, uint64_t n, bool overwrite,
                                  const AlignedBuffer& scratch,
                                  const EditFn& fn) {
  const uint64_t per = chunk_elems();
  for (uint64_t e = first; e < first + n;) {
    const uint64_t j = e / per;
    const uint64_t lo = e - j * per;
    const uint64_t hi = std::min(per, first + n - j * per);
    const uint64_t valid =
        std::min<uint64_t>(per, header_.size - j * per);  // elements in chunk
    if (overwrite && lo == 0 && hi >= valid) {
      std::memset(scratch.data(), 0, chunk_len(j));
    } else {
      ZS_RETURN_IF_ERROR(ReadChunk(j, scratch.data()));
    }
    fn(scratch.data(), j * per, lo, hi);
    ZS_RETURN_IF_ERROR(WriteChunk(j, scratch.data()));
    e = j * per + hi;
  }
  return absl::OkStatus();
}

}  // namespace storage
}  // namespace zeroshard
