#include "server/storage/manifest.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/crc32c.h"

namespace zeroshard {
namespace storage {
namespace {

constexpr uint64_t kManifestMagic = 0x3146494E414D535Aull;  // "ZSMANIF1"
constexpr uint64_t kArrayMagic = 0x315941525241535Aull;     // "ZSARRAY1"
constexpr uint32_t kVersion = 1;

class Writer {
 public:
  template <typename T>
  void Put(T x) {
    out_.append(reinterpret_cast<const char*>(&x), sizeof(x));
  }
  std::string& out() { return out_; }

 private:
  std::string out_;
};

class Reader {
 public:
  Reader(const std::string& s, size_t limit) : s_(s), limit_(limit) {}
  template <typename T>
  bool Get(T* x) {
    if (pos_ + sizeof(T) > limit_) return false;
    std::memcpy(x, s_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool done() const { return pos_ == limit_; }

 private:
  const std::string& s_;
  const size_t limit_;
  size_t pos_ = 0;
};

}  // namespace

const char* ArrayName(ArrayKind kind) {
  switch (kind) {
    case kP:
      return "p";
    case kM:
      return "m";
    case kV:
      return "v";
    case kServe:
      return "serve";
    case kGrad:
      return "grad";
  }
  return "?";
}

std::string EncodeManifest(const Manifest& m) {
  Writer w;
  w.Put(kManifestMagic);
  w.Put(kVersion);
  w.Put(m.layout.size);
  w.Put(static_cast<uint32_t>(m.layout.serving == ServingType::kFp16 ? 2 : 1));
  w.Put(m.sub_group_size);
  w.Put(m.block_size);
  w.Put(m.generation);
  w.Put(m.steps);
  w.Put(static_cast<uint32_t>(m.dirty ? 1 : 0));
  w.Put(static_cast<uint32_t>(m.layout.groups.size()));
  for (const GroupSpan& g : m.layout.groups) {
    w.Put(g.begin);
    w.Put(g.end);
    w.Put(g.group);
  }
  for (const auto& table : m.crcs) {
    w.Put(static_cast<uint32_t>(table.size()));
    for (uint32_t c : table) w.Put(c);
  }
  w.Put(Crc32c(w.out().data(), w.out().size()));
  return std::move(w.out());
}

absl::StatusOr<Manifest> DecodeManifest(const std::string& bytes,
                                        const std::string& path) {
  auto bad = [&](const std::string& why) {
    return absl::DataLossError(
        absl::StrCat(path, ": corrupt or unreadable manifest (", why, ")"));
  };
  if (bytes.size() < 12) return bad("too short");
  uint32_t stored;
  std::memcpy(&stored, bytes.data() + bytes.size() - 4, 4);
  if (Crc32c(bytes.data(), bytes.size() - 4) != stored) {
    return bad("checksum mismatch");
  }
  Reader r(bytes, bytes.size() - 4);
  uint64_t magic;
  uint32_t version = 0, serving = 0, dirty = 0, groups = 0;
  Manifest m;
  if (!r.Get(&magic) || magic != kManifestMagic) return bad("bad magic");
  if (!r.Get(&version) || version != kVersion) {
    return bad(
        absl::StrCat("version ", version, ", this build reads ", kVersion));
  }
  if (!r.Get(&m.layout.size) || !r.Get(&serving) || !r.Get(&m.sub_group_size) ||
      !r.Get(&m.block_size) || !r.Get(&m.generation) || !r.Get(&m.steps) ||
      !r.Get(&dirty) || !r.Get(&groups)) {
    return bad("truncated");
  }
  m.layout.serving = serving == 2 ? ServingType::kFp16 : ServingType::kBf16;
  m.dirty = dirty != 0;
  for (uint32_t i = 0; i < groups; ++i) {
    GroupSpan g;
    if (!r.Get(&g.begin) || !r.Get(&g.end) || !r.Get(&g.group)) {
      return bad("truncated");
    }
    m.layout.groups.push_back(g);
  }
  for (auto& table : m.crcs) {
    uint32_t n;
    if (!r.Get(&n)) return bad("truncated");
    table.resize(n);
    for (uint32_t i = 0; i < n; ++i) {
      if (!r.Get(&table[i])) return bad("truncated");
    }
  }
  if (!r.done()) return bad("trailing bytes");
  if (absl::Status s = ValidateLayout(m.layout); !s.ok()) {
    return bad(std::string(s.message()));
  }
  return m;
}

void EncodeArrayHeader(const ArrayHeader& h, char* out) {
  Writer w;
  w.Put(kArrayMagic);
  w.Put(kVersion);
  w.Put(static_cast<uint32_t>(h.kind));
  w.Put(h.generation);
  w.Put(h.size);
  w.Put(ElementBytes(h.kind));
  w.Put(h.block_size);
  w.Put(Crc32c(w.out().data(), w.out().size()));
  std::memset(out, 0, kHeaderBytes);
  std::memcpy(out, w.out().data(), w.out().size());
}

absl::Status CheckArrayHeader(const char* block, const ArrayHeader& want,
                              const std::string& path) {
  char expect[kHeaderBytes];
  EncodeArrayHeader(want, expect);
  if (std::memcmp(block, expect, kHeaderBytes) == 0) return absl::OkStatus();
  uint64_t magic;
  std::memcpy(&magic, block, 8);
  if (magic != kArrayMagic) {
    return absl::DataLossError(
        absl::StrCat(path, ": not a zeroshard array file (bad magic)"));
  }
  return absl::DataLossError(absl::StrCat(
      path, ": header does not match the manifest (kind ", ArrayName(want.kind),
      ", generation ", want.generation, ", ", want.size,
      " elements, block_size ", want.block_size, ") or is corrupt"));
}

}  // namespace storage
}  // namespace zeroshard
