// fp32 <-> bf16 / fp16 conversions of arrays in GPU memory.
//
// Contract:
//   * Every element is converted exactly like the CPU scalar reference in
//     common/dtype.h (Fp32ToBf16, Bf16ToFp32, Fp32ToFp16, Fp16ToFp32), bit
//     for bit: round to nearest, ties to even; no flush of subnormal inputs
//     or outputs; overflow to +-Inf; the same NaN rules (narrowing keeps the
//     sign and top payload bits and sets the quiet bit; bf16 -> fp32 is
//     bit-preserving; fp16 -> fp32 quiets and keeps sign and payload). The
//     kernels use integer bit manipulation only, so the result does not
//     depend on the GPU's float mode flags or on compiler options such as
//     --use_fast_math. (CUDA's __float2half_rn / __half2float are not used:
//     they return a canonical NaN, 0x7FFF / 0x7FFFFFFF, instead of keeping
//     the payload.)
//   * `src` and `dst` are device pointers (cudaMalloc, cudaMallocManaged or
//     mapped host memory) valid on the current device, of at least n
//     elements, and must not overlap. n == 0 is allowed (pointers may then
//     be null; nothing is launched). Natural alignment of the element type
//     suffices.
//   * The launchers are asynchronous: they enqueue one kernel on `stream`
//     (nullptr = the legacy default stream) and return. They return true if
//     the launch succeeded (cudaGetLastError() == cudaSuccess after the
//     launch); otherwise false, with "<function>: <cudaErrorName>: <message>"
//     in *error (if error is not null). Errors during execution (e.g. a bad
//     pointer) surface at the next synchronizing call on that stream, as
//     usual in CUDA. An error left pending by earlier unrelated CUDA calls
//     is also reported (and cleared) by the launch check.
//   * Built without --config=cuda (ZEROSHARD_HAVE_CUDA undefined), every
//     launcher returns false with *error = "built without --config=cuda" and
//     touches nothing.
//   * Thread-safe, as far as CUDA launches on the given stream are.
#ifndef ZEROSHARD_COMMON_CUDA_DTYPE_CUDA_H_
#define ZEROSHARD_COMMON_CUDA_DTYPE_CUDA_H_

#include <cstddef>
#include <cstdint>
#include <string>

// cudaStream_t is `struct CUstream_st*`; declared here so that this header
// does not need the CUDA headers (it is included in non-CUDA builds too).
struct CUstream_st;

namespace zeroshard {
namespace cuda {

bool Fp32ToBf16Device(const float* src, uint16_t* dst, size_t n,
                      CUstream_st* stream, std::string* error);
bool Bf16ToFp32Device(const uint16_t* src, float* dst, size_t n,
                      CUstream_st* stream, std::string* error);
bool Fp32ToFp16Device(const float* src, uint16_t* dst, size_t n,
                      CUstream_st* stream, std::string* error);
bool Fp16ToFp32Device(const uint16_t* src, float* dst, size_t n,
                      CUstream_st* stream, std::string* error);

#ifdef ZEROSHARD_HAVE_CUDA
namespace dtype_cuda_internal {
// For tests: the very element functions the kernels run, compiled by nvcc
// for the host, so that their bit-exactness can be checked without a GPU.
// Only defined under --config=cuda.
uint16_t Fp32ToBf16OnHost(float f);
float Bf16ToFp32OnHost(uint16_t h);
uint16_t Fp32ToFp16OnHost(float f);
float Fp16ToFp32OnHost(uint16_t h);
}  // namespace dtype_cuda_internal
#endif

}  // namespace cuda
}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_CUDA_DTYPE_CUDA_H_
