#include "proto/wire.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace zeroshard {
namespace wire {
namespace {

constexpr uint32_t kVarint = 0;
constexpr uint32_t kFixed64 = 1;
constexpr uint32_t kLengthDelimited = 2;
constexpr uint32_t kFixed32 = 5;

size_t PutVarint(uint64_t v, char* out) {
  size_t n = 0;
  while (v >= 0x80) {
    out[n++] = static_cast<char>(v | 0x80);
    v >>= 7;
  }
  out[n++] = static_cast<char>(v);
  return n;
}

size_t PutTag(uint32_t field, uint32_t wire_type, char* out) {
  return PutVarint((static_cast<uint64_t>(field) << 3) | wire_type, out);
}

// A varint field as proto3 writes it: absent when zero.
size_t PutVarintField(uint32_t field, uint64_t v, char* out) {
  if (v == 0) return 0;
  const size_t n = PutTag(field, kVarint, out);
  return n + PutVarint(v, out + n);
}

absl::Status Malformed(const char* what) {
  return absl::InvalidArgumentError(
      absl::StrCat("malformed ", what, " (bad protobuf encoding)"));
}

}  // namespace

// Reads a WireMessage from the front. Every method returns false on
// truncated or malformed input.
class Reader {
 public:
  explicit Reader(const WireMessage& m) : pieces_(m.pieces_), left_(m.size_) {}

  bool done() const { return left_ == 0; }

  bool ReadVarint(uint64_t* v) {
    uint64_t result = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (done()) return false;
      const uint8_t b = static_cast<uint8_t>(pieces_[index_][offset_]);
      Advance(1);
      // The 10th byte may only carry the top bit of a 64-bit value.
      if (shift == 63 && b > 1) return false;
      result |= static_cast<uint64_t>(b & 0x7F) << shift;
      if ((b & 0x80) == 0) {
        *v = result;
        return true;
      }
    }
    return false;
  }

  bool ReadTag(uint32_t* field, uint32_t* wire_type) {
    uint64_t tag = 0;
    if (!ReadVarint(&tag) || tag > 0xFFFFFFFFu || (tag >> 3) == 0) {
      return false;
    }
    *field = static_cast<uint32_t>(tag >> 3);
    *wire_type = static_cast<uint32_t>(tag & 7);
    return true;
  }

  // Takes the next `n` bytes as pieces of `out` (or just skips them when
  // out is null).
  bool Take(uint64_t n, Bytes* out) {
    if (n > left_) return false;
    if (out != nullptr) {
      out->Clear();
      out->size = n;
      out->present = true;
    }
    while (n > 0) {
      const absl::string_view s = pieces_[index_];
      const size_t take = std::min<uint64_t>(n, s.size() - offset_);
      if (out != nullptr) out->pieces.push_back(s.substr(offset_, take));
      Advance(take);
      n -= take;
    }
    return true;
  }

  // Skips the value of a field of `wire_type` whose tag was just read.
  bool SkipField(uint32_t wire_type) {
    uint64_t v = 0;
    switch (wire_type) {
      case kVarint:
        return ReadVarint(&v);
      case kFixed64:
        return Take(8, nullptr);
      case kFixed32:
        return Take(4, nullptr);
      case kLengthDelimited:
        return ReadVarint(&v) && Take(v, nullptr);
      default:  // groups (3, 4) are not used by proto3; 6, 7 are invalid
        return false;
    }
  }

  // A length-delimited field's bytes (tag already read).
  bool ReadBytes(Bytes* out) {
    uint64_t n = 0;
    return ReadVarint(&n) && Take(n, out);
  }

 private:
  void Advance(size_t n) {
    offset_ += n;
    left_ -= n;
    if (offset_ == pieces_[index_].size()) {
      ++index_;
      offset_ = 0;
    }
  }

  const absl::InlinedVector<absl::string_view, 1>& pieces_;
  size_t index_ = 0;
  size_t offset_ = 0;
  size_t left_ = 0;
};

size_t EncodeGatherChunkPrefix(uint64_t step, uint64_t offset,
                               uint64_t data_bytes, char* out) {
  size_t n = PutVarintField(1, step, out);
  n += PutVarintField(2, offset, out + n);
  if (data_bytes > 0) {
    n += PutTag(3, kLengthDelimited, out + n);
    n += PutVarint(data_bytes, out + n);
  }
  return n;
}

std::string EncodePushRequestPrefix(const v1::PushHeader* header,
                                    uint64_t data_bytes) {
  char buf[2 * (1 + 10)];
  std::string out;
  if (header != nullptr) {
    const std::string h = header->SerializeAsString();
    size_t n = PutTag(1, kLengthDelimited, buf);
    n += PutVarint(h.size(), buf + n);
    out.append(buf, n);
    out.append(h);
  }
  if (data_bytes > 0) {
    size_t n = PutTag(2, kLengthDelimited, buf);
    n += PutVarint(data_bytes, buf + n);
    out.append(buf, n);
  }
  return out;
}

WireMessage::WireMessage(const grpc::ByteBuffer& buffer) {
  if (!buffer.Dump(&slices_).ok()) slices_.clear();
  for (const grpc::Slice& s : slices_) {
    if (s.size() == 0) continue;
    pieces_.emplace_back(reinterpret_cast<const char*>(s.begin()), s.size());
    size_ += s.size();
  }
}

WireMessage::WireMessage(absl::string_view bytes) {
  if (!bytes.empty()) pieces_.push_back(bytes);
  size_ = bytes.size();
}

void Bytes::CopyTo(char* out) const {
  for (absl::string_view p : pieces) {
    std::memcpy(out, p.data(), p.size());
    out += p.size();
  }
}

std::string Bytes::ToString() const {
  std::string s(size, '\0');
  CopyTo(s.data());
  return s;
}

// Walks every field of `message`: `known` reads the value of a field it
// knows and returns true (false: malformed), or returns false without
// reading after setting *unknown (then the field is skipped).
template <typename Known>
absl::Status ForEachField(const WireMessage& message, const char* what,
                          Known known) {
  Reader in(message);
  while (!in.done()) {
    uint32_t field = 0, wire_type = 0;
    if (!in.ReadTag(&field, &wire_type)) return Malformed(what);
    bool unknown = false;
    const bool ok = known(in, field, wire_type, &unknown) ||
                    (unknown && in.SkipField(wire_type));
    if (!ok) return Malformed(what);
  }
  return absl::OkStatus();
}

// A bytes field that must appear at most once.
bool ReadOnce(Reader& in, Bytes* out) {
  return !out->present && in.ReadBytes(out);
}

absl::Status ParseGatherChunk(const WireMessage& message,
                              GatherChunkView* out) {
  out->step = out->offset = out->shared_bytes = 0;
  out->data.Clear();
  return ForEachField(
      message, "GatherChunk",
      [out](Reader& in, uint32_t field, uint32_t wire_type, bool* unknown) {
        if (field == 1 && wire_type == kVarint)
          return in.ReadVarint(&out->step);
        if (field == 2 && wire_type == kVarint) {
          return in.ReadVarint(&out->offset);
        }
        if (field == 3 && wire_type == kLengthDelimited) {
          return ReadOnce(in, &out->data);
        }
        if (field == 4 && wire_type == kVarint) {
          return in.ReadVarint(&out->shared_bytes);
        }
        *unknown = true;
        return false;
      });
}

absl::Status ParsePushRequest(const WireMessage& message,
                              PushRequestView* out) {
  out->header.Clear();
  out->data.Clear();
  out->shared.Clear();
  return ForEachField(
      message, "PushGradientsRequest",
      [out](Reader& in, uint32_t field, uint32_t wire_type, bool* unknown) {
        if (wire_type == kLengthDelimited && field == 1) {
          return ReadOnce(in, &out->header);
        }
        if (wire_type == kLengthDelimited && field == 2) {
          return ReadOnce(in, &out->data);
        }
        if (wire_type == kLengthDelimited && field == 3) {
          return ReadOnce(in, &out->shared);
        }
        *unknown = true;
        return false;
      });
}

}  // namespace wire
}  // namespace zeroshard
