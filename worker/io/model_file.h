// GPT-2 model files in llm.c's format, read into and written from the flat
// fp32 parameter buffer in zeroshard's MEMORY order (worker/gpt2/config.h).
//
// Format (little-endian):
//   header: 256 x int32: [0] magic 20240326, [1] version (3 = fp32 params,
//           5 = bf16 params), [2] max_seq_len, [3] vocab_size,
//           [4] num_layers, [5] num_heads, [6] channels,
//           [7] padded_vocab_size, the rest 0;
//   params: every tensor in llm.c's FILE order (ParamLayout::FileOrder():
//           wte, wpe, ln1w of all layers, ln1b of all layers, ..., lnfw,
//           lnfb), fp32 or bf16, nothing after them.
//
// Reading permutes file order into memory order; bf16 (version 5) is
// widened to fp32 exactly (common/dtype.h). Writing produces version 3 by
// default, version 5 on request (fp32 -> bf16 rounds to nearest even).
// Each tensor is read with one positional read into its place in the
// destination (bf16: through a bounded staging buffer).
//
// I/O goes through a Env (common/env; DefaultEnv() unless a test
// passes a MemEnv or FaultEnv).
//
// Errors (every message names the file):
//   NOT_FOUND         the file does not exist;
//   INVALID_ARGUMENT  wrong magic, unsupported version, header fields that
//                     are not a valid config (ValidateConfig: non-positive,
//                     heads not dividing channels, too many parameters), a
//                     config other than the caller's layout;
//   DATA_LOSS         shorter than the header, or a length other than the
//                     header implies (truncated or trailing bytes);
//   others            the Env's error of a failed open/read/write/rename.
// Writers write to a temporary file and rename it into place
// (AtomicFileWriter), so a failed write leaves `path` as it was.
//
// Threading: the functions are independent and thread-safe; callers must
// not modify `params` while it is being written or read into.
//
// Example:
//   ZS_ASSIGN_OR_RETURN(ModelFile m, ReadModelFile("gpt2_124M.bin"));
//   ZS_ASSIGN_OR_RETURN(auto layout, gpt2::ParamLayout::Create(m.config));
//   ... train m.params ...
//   ZS_RETURN_IF_ERROR(WriteModelFile("out.bin", layout, m.params.data()));
#ifndef ZEROSHARD_WORKER_IO_MODEL_FILE_H_
#define ZEROSHARD_WORKER_IO_MODEL_FILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/env/env.h"
#include "worker/gpt2/config.h"

namespace zeroshard::io {

inline constexpr int32_t kModelMagic = 20240326;
inline constexpr int32_t kModelVersionFp32 = 3;
inline constexpr int32_t kModelVersionBf16 = 5;

enum class ModelDtype { kFp32, kBf16 };

struct ModelFileInfo {
  gpt2::Config config;
  ModelDtype dtype = ModelDtype::kFp32;
  int32_t version = 0;  // 3 or 5
};

// Reads and checks the header and the file's length.
absl::StatusOr<ModelFileInfo> ReadModelFileInfo(const std::string& path,
                                                Env* env = DefaultEnv());

// Reads the parameters into `params`, which must hold layout.num_params()
// floats, in memory order. The file's config must equal layout.config().
// On error `params` may be partly overwritten.
absl::Status ReadModelParams(const std::string& path,
                             const gpt2::ParamLayout& layout, float* params,
                             Env* env = DefaultEnv());

struct ModelFile {
  gpt2::Config config;
  int32_t version = 0;
  std::vector<float> params;  // memory order, num_params() floats
};

// Reads the whole file: header and parameters.
absl::StatusOr<ModelFile> ReadModelFile(const std::string& path,
                                        Env* env = DefaultEnv());

// Writes layout.num_params() floats of `params` (memory order) as a model
// file of version 3 (kFp32) or 5 (kBf16).
absl::Status WriteModelFile(const std::string& path,
                            const gpt2::ParamLayout& layout,
                            const float* params,
                            ModelDtype dtype = ModelDtype::kFp32,
                            Env* env = DefaultEnv());

}  // namespace zeroshard::io

#endif  // ZEROSHARD_WORKER_IO_MODEL_FILE_H_
