#include "server/storage/grad_slots.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/storage/buffer.h"

namespace zeroshard {
namespace storage {
namespace {

absl::Status OutsideSlots(uint32_t slot, uint64_t offset, uint64_t count) {
  return absl::InvalidArgumentError(absl::StrCat("gradient slot ", slot, " [",
                                                 offset, ", ", offset + count,
                                                 ") is outside the slots"));
}

class RamGradSlots : public GradSlots {
 public:
  explicit RamGradSlots(uint64_t n) : n_(n) {}
  absl::Status Allocate(uint32_t slots) {
    for (uint32_t s = 1; s < slots; ++s) {
      absl::StatusOr<AlignedBuffer> b = AlignedBuffer::Allocate(
          n_ * 4, &account_, absl::StrCat("gradient slot ", s));
      if (!b.ok()) {
        return absl::ResourceExhaustedError(absl::StrCat(
            (slots - 1) * n_ * 4, " bytes of gradient slots (", slots - 1,
            " x ", n_, " x 4): ", b.status().message()));
      }
      buffers_.push_back(*std::move(b));
    }
    return absl::OkStatus();
  }
  absl::Status Write(uint32_t slot, uint64_t offset, const float* data,
                     uint64_t count) override {
    ZS_ASSIGN_OR_RETURN(float* dst, At(slot, offset, count));
    std::copy(data, data + count, dst);
    return absl::OkStatus();
  }
  absl::Status AddInto(uint32_t slot, uint64_t offset, uint64_t count,
                       float* g) override {
    ZS_ASSIGN_OR_RETURN(const float* src, At(slot, offset, count));
    for (uint64_t e = 0; e < count; ++e) g[e] += src[e];
    return absl::OkStatus();
  }
  uint64_t bytes_held() const override { return account_.current(); }

 private:
  absl::StatusOr<float*> At(uint32_t slot, uint64_t offset, uint64_t count) {
    if (slot == 0 || slot > buffers_.size() || offset > n_ ||
        count > n_ - offset) {
      return OutsideSlots(slot, offset, count);
    }
    return buffers_[slot - 1].as<float>() + offset;
  }

  const uint64_t n_;
  MemoryAccount account_;
  std::vector<AlignedBuffer> buffers_;  // [s - 1] for slot s
};

}  // namespace

absl::StatusOr<std::unique_ptr<GradSlots>> NewRamGradSlots(uint32_t slots,
                                                           uint64_t n) {
  if (n > (uint64_t{1} << 59)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("gradient slots of ", n, " elements cannot be held"));
  }
  auto g = std::make_unique<RamGradSlots>(n);
  ZS_RETURN_IF_ERROR(g->Allocate(slots));
  return std::unique_ptr<GradSlots>(std::move(g));
}

std::unique_ptr<GradWriter> NewSlotWriter(GradSlots* slots, uint32_t slot,
                                          uint64_t offset, uint64_t n) {
  return NewSequentialGradWriter(
      offset, n, [slots, slot](uint64_t at, const float* data, uint64_t count) {
        return slots->Write(slot, at, data, count);
      });
}

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
    return OutsideSlots(slot, offset, count);
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

absl::Status SlotFiles::AddInto(uint32_t slot, uint64_t offset, uint64_t count,
                                float* g) {
  ZS_ASSIGN_OR_RETURN(File * f, FileOf(slot, offset, count));
  std::vector<float> in(count);
  ZS_RETURN_IF_ERROR(f->Read(offset * 4, in.data(), count * 4));
  bytes_read_.fetch_add(count * 4);
  for (uint64_t e = 0; e < count; ++e) g[e] += in[e];
  return absl::OkStatus();
}

}  // namespace storage
}  // namespace zeroshard
