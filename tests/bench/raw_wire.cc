#include "tests/bench/raw_wire.h"

#include <algorithm>

namespace zeroshard {
namespace bench {

void PutVarint(std::string* out, uint64_t v) {
  uint8_t buf[10];
  out->append(reinterpret_cast<const char*>(buf), PutVarint(buf, v));
}

size_t PutVarint(uint8_t* p, uint64_t v) {
  size_t n = 0;
  while (v >= 0x80) {
    p[n++] = static_cast<uint8_t>(v | 0x80);
    v >>= 7;
  }
  p[n++] = static_cast<uint8_t>(v);
  return n;
}

SliceReader::SliceReader(const grpc::ByteBuffer& buffer) {
  buffer.Dump(&slices_).IgnoreError();
  // Drop empty slices so that index_ always points at readable bytes.
  slices_.erase(
      std::remove_if(slices_.begin(), slices_.end(),
                     [](const grpc::Slice& s) { return s.size() == 0; }),
      slices_.end());
  for (const grpc::Slice& s : slices_) remaining_ += s.size();
}

void SliceReader::Advance(size_t n) {
  offset_ += n;
  remaining_ -= n;
  if (offset_ == slices_[index_].size()) {
    ++index_;
    offset_ = 0;
  }
}

bool SliceReader::ReadVarint(uint64_t* v) {
  uint64_t result = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (done()) return false;
    const uint8_t b = slices_[index_].begin()[offset_];
    Advance(1);
    result |= static_cast<uint64_t>(b & 0x7F) << shift;
    if ((b & 0x80) == 0) {
      *v = result;
      return true;
    }
  }
  return false;
}

bool SliceReader::ReadTag(uint32_t* field, uint32_t* wire_type) {
  uint64_t tag = 0;
  if (!ReadVarint(&tag) || tag > 0xFFFFFFFFu || (tag >> 3) == 0) return false;
  *field = static_cast<uint32_t>(tag >> 3);
  *wire_type = static_cast<uint32_t>(tag & 7);
  return true;
}

bool SliceReader::Consume(
    size_t n, const std::function<bool(const uint8_t*, size_t)>& fn) {
  if (n > remaining_) return false;
  while (n > 0) {
    const grpc::Slice& s = slices_[index_];
    const size_t take = std::min(n, s.size() - offset_);
    if (!fn(s.begin() + offset_, take)) return false;
    Advance(take);
    n -= take;
  }
  return true;
}

bool SliceReader::ReadString(size_t n, std::string* out) {
  out->clear();
  out->reserve(n);
  return Consume(n, [out](const uint8_t* p, size_t k) {
    out->append(reinterpret_cast<const char*>(p), k);
    return true;
  });
}

bool SliceReader::Skip(size_t n) {
  return Consume(n, [](const uint8_t*, size_t) { return true; });
}

bool SliceReader::SkipField(uint32_t wire_type) {
  uint64_t v = 0;
  switch (wire_type) {
    case kWireVarint:
      return ReadVarint(&v);
    case kWireFixed64:
      return Skip(8);
    case kWireFixed32:
      return Skip(4);
    case kWireLengthDelimited:
      return ReadVarint(&v) && v <= remaining_ && Skip(v);
    default:
      return false;
  }
}

}  // namespace bench
}  // namespace zeroshard
