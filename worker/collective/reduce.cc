#include "worker/collective/reduce.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/dtype.h"

namespace zeroshard {
namespace collective {
namespace {

constexpr size_t kBlock = 2048;  // elements per block (8 KiB of fp32)

void Load(const void* src, DType dtype, size_t offset, size_t len, float* dst) {
  if (dtype == DType::kFloat32) {
    std::memcpy(dst, static_cast<const float*>(src) + offset,
                len * sizeof(float));
  } else {
    ConvertBf16ToFp32(static_cast<const uint16_t*>(src) + offset, dst, len);
  }
}

// dst[0..len) = T(inputs[lo..hi)) over elements [offset, offset+len).
// `scratch` has room for one block per remaining tree level.
void TreeBlock(const void* const* inputs, int lo, int hi, DType in,
               size_t offset, size_t len, float* dst, float* scratch) {
  if (hi - lo == 1) {
    Load(inputs[lo], in, offset, len, dst);
    return;
  }
  const int mid = lo + TreeSplit(hi - lo);
  TreeBlock(inputs, lo, mid, in, offset, len, dst, scratch);
  TreeBlock(inputs, mid, hi, in, offset, len, scratch, scratch + kBlock);
  for (size_t j = 0; j < len; ++j) dst[j] = dst[j] + scratch[j];
}

}  // namespace

int TreeSplit(int n) {
  int p = 1;
  while (p * 2 < n) p *= 2;
  return p;
}

void ReduceTree(const void* const* inputs, int n, DType in, void* out,
                DType out_dtype, size_t count) {
  int depth = 1;
  for (int m = n; m > 1; m = (m + 1) / 2) ++depth;
  std::vector<float> tmp(kBlock * (depth + 1));
  float* sum = tmp.data();
  for (size_t offset = 0; offset < count; offset += kBlock) {
    const size_t len = std::min(kBlock, count - offset);
    TreeBlock(inputs, 0, n, in, offset, len, sum, sum + kBlock);
    if (out_dtype == DType::kFloat32) {
      std::memcpy(static_cast<float*>(out) + offset, sum, len * sizeof(float));
    } else {
      ConvertFp32ToBf16(sum, static_cast<uint16_t*>(out) + offset, len);
    }
  }
}

}  // namespace collective
}  // namespace zeroshard
