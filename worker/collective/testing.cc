#include "worker/collective/testing.h"

#include <cmath>
#include <cstring>

#include "common/dtype.h"
#include "common/seeded_random.h"

namespace zeroshard {
namespace collective {
namespace {

float Get(const std::vector<char>& v, DType dtype, uint64_t i) {
  if (dtype == DType::kFloat32) {
    float f;
    std::memcpy(&f, v.data() + i * 4, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, v.data() + i * 2, 2);
  return Bf16ToFp32(h);
}

void Put(std::vector<char>& v, DType dtype, uint64_t i, float f) {
  if (dtype == DType::kFloat32) {
    std::memcpy(v.data() + i * 4, &f, 4);
  } else {
    const uint16_t h = Fp32ToBf16(f);
    std::memcpy(v.data() + i * 2, &h, 2);
  }
}

// Written independently of reduce.cc from the definition in reduce.h.
float Tree(const float* x, int n) {
  if (n == 1) return x[0];
  int p = 1;
  while (2 * p < n) p *= 2;
  return Tree(x, p) + Tree(x + p, n - p);
}

}  // namespace

std::vector<char> MakeInput(uint64_t seed, int rank, uint64_t count,
                            DType dtype) {
  std::vector<char> v(count * DTypeSize(dtype));
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t h = SplitMix64(seed ^ SplitMix64(rank * 0x100000001ull + i));
    const float mantissa = static_cast<float>(h >> 40) / (1 << 24) - 0.5f;
    const int exponent = static_cast<int>((h >> 8) % 25) - 12;
    Put(v, dtype, i, std::ldexp(mantissa, exponent));
  }
  return v;
}

std::vector<char> ReferenceSum(const std::vector<std::vector<char>>& inputs,
                               DType dtype, int local_size) {
  const int w = static_cast<int>(inputs.size());
  const int g = local_size <= 1 ? w : local_size;
  const uint64_t count = inputs[0].size() / DTypeSize(dtype);
  std::vector<char> out(inputs[0].size());
  std::vector<float> x(w), nodes(w / g);
  for (uint64_t i = 0; i < count; ++i) {
    for (int r = 0; r < w; ++r) x[r] = Get(inputs[r], dtype, i);
    for (int n = 0; n < w / g; ++n) nodes[n] = Tree(x.data() + n * g, g);
    Put(out, dtype, i, Tree(nodes.data(), w / g));
  }
  return out;
}

std::vector<char> SequentialSum(const std::vector<std::vector<char>>& inputs,
                                DType dtype) {
  const uint64_t count = inputs[0].size() / DTypeSize(dtype);
  std::vector<char> out(inputs[0].size());
  for (uint64_t i = 0; i < count; ++i) {
    float s = Get(inputs[0], dtype, i);
    for (size_t r = 1; r < inputs.size(); ++r) s += Get(inputs[r], dtype, i);
    Put(out, dtype, i, s);
  }
  return out;
}

uint64_t Fnv1a(const void* data, size_t bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

}  // namespace collective
}  // namespace zeroshard
