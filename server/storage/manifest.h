// On-disk formats of the NVMe tier (little-endian, all integers fixed
// width):
//
// MANIFEST (written whole with WriteFileAtomic; the commit point of a step):
//   u64 magic "ZSMANIF1"   u32 version (1)
//   u64 size (elements)    u32 serving (1 bf16, 2 fp16)
//   u64 sub_group_size     u64 block_size (bytes per checksummed chunk)
//   u64 generation         u64 steps          u32 dirty (1 while WriteMaster
//                                             writes the generation in place)
//   u32 groups, then per group: u64 begin, u64 end, u32 group
//   for each array p, m, v, serve: u32 chunks, then u32 CRC-32C per chunk
//   u32 CRC-32C of every byte above
//
// Array file "<name>.<generation>" (p, m, v, serve; "grad" for gradients):
//   [0, 4096)   header: u64 magic "ZSARRAY1", u32 version (1), u32 kind,
//               u64 generation, u64 size, u32 element bytes, u64 block_size,
//               u32 CRC-32C of the preceding bytes; zero padding
//   [4096, ...) the elements, zero-padded to a multiple of 4096; chunk j is
//               the block_size bytes at 4096 + j * block_size (the last one
//               shorter), checksummed by the manifest's CRC table.
//
// Functions are pure; errors are DATA_LOSS naming `path`.
#ifndef ZEROSHARD_SERVER_STORAGE_MANIFEST_H_
#define ZEROSHARD_SERVER_STORAGE_MANIFEST_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/storage/tier.h"

namespace zeroshard {
namespace storage {

// Arrays kept in generations (kP..kServe) and the gradient file.
enum ArrayKind : uint32_t { kP = 0, kM = 1, kV = 2, kServe = 3, kGrad = 4 };
inline constexpr int kStateArrays = 4;
const char* ArrayName(ArrayKind kind);
inline uint32_t ElementBytes(ArrayKind kind) { return kind == kServe ? 2 : 4; }

struct Manifest {
  TierLayout layout;
  uint64_t sub_group_size = 0;
  uint64_t block_size = 0;
  uint64_t generation = 0;
  uint64_t steps = 0;
  bool dirty = false;
  std::array<std::vector<uint32_t>, kStateArrays> crcs;
};

std::string EncodeManifest(const Manifest& m);
absl::StatusOr<Manifest> DecodeManifest(const std::string& bytes,
                                        const std::string& path);

struct ArrayHeader {
  ArrayKind kind = kP;
  uint64_t generation = 0;
  uint64_t size = 0;
  uint64_t block_size = 0;
};
inline constexpr uint64_t kHeaderBytes = 4096;
// Fills the kHeaderBytes at `out`.
void EncodeArrayHeader(const ArrayHeader& h, char* out);
// DATA_LOSS naming `path` unless `block` holds a valid header equal to `want`.
absl::Status CheckArrayHeader(const char* block, const ArrayHeader& want,
                              const std::string& path);

}  // namespace storage
}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_STORAGE_MANIFEST_H_
