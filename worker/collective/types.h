// The element types of collective buffers, in a header free of other
// dependencies (CUDA sources include it).
#ifndef ZEROSHARD_WORKER_COLLECTIVE_TYPES_H_
#define ZEROSHARD_WORKER_COLLECTIVE_TYPES_H_

#include <cstdint>

namespace zeroshard {
namespace collective {

enum class DType : uint8_t { kFloat32 = 1, kBfloat16 = 2 };

}  // namespace collective
}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_COLLECTIVE_TYPES_H_
