#include "server/storage/slot_files.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace zeroshard {
namespace storage {

absl::StatusOr<std::unique_ptr<SlotFiles>> SlotFiles::Create(
    Env* env, const std::string& dir, uint32_t slots, uint64_t n) {
  if (slots < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradient slot files need 2 or more slots, not ", slots));
  }
  if (!env->FileExists(dir)) ZS_RETURN_IF_ERROR(env->CreateDir(dir));
  std::unique_ptr<SlotFiles> f(new SlotFiles());
  f->n_ = n;
  for (uint32_t s = 1; s < slots; ++s) {
    OpenOptions o;
    o.create = true;
    ZS_ASSIGN_OR_RETURN(
        std::unique_ptr<File> file,
        env->OpenFile(JoinPath(dir, absl::StrCat("slot-", s, ".f32")), o));
    ZS_RETURN_IF_ERROR(file->Allocate(n * 4));
    f->files_.push_back(std::move(file));
  }
  return f;
}

absl::StatusOr<File*> SlotFiles::FileOf(uint32_t slot, uint64_t offset,
                                        uint64_t count) {
  if (slot == 0 || slot > files_.size() || offset > n_ || count > n_ - offset) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradient slot ", slot, " [", offset, ", ", offset + count,
                     ") is outside the slot files"));
  }
  return files_[slot - 1].get();
}

absl::Status SlotFiles::Write(uint32_t slot, uint64_t offset, const float* data,
                              uint64_t count) {
  ZS_ASSIGN_OR_RETURN(File * f, FileOf(slot, offset, count));
  ZS_RETURN_IF_ERROR(f->Write(offset * 4, data, count * 4));
  bytes_written_.fetch_add(count * 4);
  return absl::OkStatus();
}

absl::Status SlotFiles::Read(uint32_t slot, uint64_t offset, uint64_t count,
                             float* out) {
  ZS_ASSIGN_OR_RETURN(File * f, FileOf(slot, offset, count));
  ZS_RETURN_IF_ERROR(f->Read(offset * 4, out, count * 4));
  bytes_read_.fetch_add(count * 4);
  return absl::OkStatus();
}

}  // namespace storage
}  // namespace zeroshard
