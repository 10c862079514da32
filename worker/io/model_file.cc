#include "worker/io/model_file.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/env/files.h"
#include "common/status_macros.h"
#include "worker/io/llmc_header.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "llm.c files are little-endian; this reader assumes the host is");

namespace zeroshard::io {
namespace {

// Elements converted per staging step for bf16 (2 MiB of bf16).
constexpr size_t kBf16Chunk = size_t{1} << 20;

const char kKind[] = "llm.c GPT-2 model file";

size_t ElementBytes(ModelDtype dtype) {
  return dtype == ModelDtype::kFp32 ? sizeof(float) : sizeof(uint16_t);
}

absl::StatusOr<ModelFileInfo> ParseHeader(const ReadOnlyFile& file) {
  ZS_ASSIGN_OR_RETURN(FileHeader h, ReadHeader(file, kModelMagic, kKind));
  ModelFileInfo info;
  info.version = h[1];
  if (h[1] == kModelVersionFp32) {
    info.dtype = ModelDtype::kFp32;
  } else if (h[1] == kModelVersionBf16) {
    info.dtype = ModelDtype::kBf16;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(file.path(), ": unsupported model file version ", h[1],
                     " (zeroshard reads 3 = fp32 and 5 = bf16)"));
  }
  gpt2::Config& c = info.config;
  c.max_seq_len = h[2];
  c.vocab_size = h[3];
  c.num_layers = h[4];
  c.num_heads = h[5];
  c.channels = h[6];
  c.padded_vocab_size = h[7];
  if (absl::Status s = gpt2::ValidateConfig(c); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.path(), ": header holds an invalid ", s.message()));
  }
  ZS_ASSIGN_OR_RETURN(gpt2::ParamLayout layout, gpt2::ParamLayout::Create(c));
  // ValidateConfig bounds num_params by INT64_MAX / 4: no overflow here.
  const uint64_t expected =
      kHeaderBytes + layout.num_params() * ElementBytes(info.dtype);
  ZS_RETURN_IF_ERROR(CheckFileSize(
      file, expected,
      absl::StrCat("header (version ", h[1], ", ", gpt2::DescribeConfig(c),
                   ", ", layout.num_params(), " parameters)")));
  return info;
}

absl::Status ReadParams(const ReadOnlyFile& file, const ModelFileInfo& info,
                        const gpt2::ParamLayout& layout, float* params) {
  if (!(info.config == layout.config())) {
    return absl::InvalidArgumentError(absl::StrCat(
        file.path(), ": model config ", gpt2::DescribeConfig(info.config),
        " differs from the expected ", gpt2::DescribeConfig(layout.config())));
  }
  std::vector<uint16_t> staging;
  if (info.dtype == ModelDtype::kBf16) {
    staging.resize(std::min<uint64_t>(kBf16Chunk, layout.num_params()));
  }
  uint64_t pos = kHeaderBytes;
  for (const gpt2::ParamTensor* t : layout.FileOrder()) {
    float* dst = params + t->offset;
    if (info.dtype == ModelDtype::kFp32) {
      ZS_RETURN_IF_ERROR(file.Read(pos, dst, t->numel * sizeof(float)));
      pos += t->numel * sizeof(float);
      continue;
    }
    for (uint64_t done = 0; done < t->numel;) {
      const size_t n = std::min<uint64_t>(staging.size(), t->numel - done);
      ZS_RETURN_IF_ERROR(file.Read(pos, staging.data(), n * sizeof(uint16_t)));
      ConvertBf16ToFp32(staging.data(), dst + done, n);
      pos += n * sizeof(uint16_t);
      done += n;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelFileInfo> ReadModelFileInfo(const std::string& path,
                                                Env* env) {
  ZS_ASSIGN_OR_RETURN(ReadOnlyFile file, ReadOnlyFile::Open(env, path));
  return ParseHeader(file);
}

absl::Status ReadModelParams(const std::string& path,
                             const gpt2::ParamLayout& layout, float* params,
                             Env* env) {
  ZS_ASSIGN_OR_RETURN(ReadOnlyFile file, ReadOnlyFile::Open(env, path));
  ZS_ASSIGN_OR_RETURN(ModelFileInfo info, ParseHeader(file));
  return ReadParams(file, info, layout, params);
}

absl::StatusOr<ModelFile> ReadModelFile(const std::string& path, Env* env) {
  ZS_ASSIGN_OR_RETURN(ReadOnlyFile file, ReadOnlyFile::Open(env, path));
  ZS_ASSIGN_OR_RETURN(ModelFileInfo info, ParseHeader(file));
  ZS_ASSIGN_OR_RETURN(gpt2::ParamLayout layout,
                      gpt2::ParamLayout::Create(info.config));
  ModelFile model;
  model.config = info.config;
  model.version = info.version;
  model.params.resize(layout.num_params());
  ZS_RETURN_IF_ERROR(ReadParams(file, info, layout, model.params.data()));
  return model;
}

absl::Status WriteModelFile(const std::string& path,
                            const gpt2::ParamLayout& layout,
                            const float* params, ModelDtype dtype, Env* env) {
  const gpt2::Config& c = layout.config();
  FileHeader h{};
  h[0] = kModelMagic;
  h[1] = dtype == ModelDtype::kFp32 ? kModelVersionFp32 : kModelVersionBf16;
  h[2] = c.max_seq_len;
  h[3] = c.vocab_size;
  h[4] = c.num_layers;
  h[5] = c.num_heads;
  h[6] = c.channels;
  h[7] = c.padded_vocab_size;
  ZS_ASSIGN_OR_RETURN(AtomicFileWriter out,
                      AtomicFileWriter::Create(env, path));
  ZS_RETURN_IF_ERROR(out.Append(h.data(), kHeaderBytes));
  std::vector<uint16_t> staging;
  if (dtype == ModelDtype::kBf16) {
    staging.resize(std::min<uint64_t>(kBf16Chunk, layout.num_params()));
  }
  for (const gpt2::ParamTensor* t : layout.FileOrder()) {
    const float* src = params + t->offset;
    if (dtype == ModelDtype::kFp32) {
      ZS_RETURN_IF_ERROR(out.Append(src, t->numel * sizeof(float)));
      continue;
    }
    for (uint64_t done = 0; done < t->numel;) {
      const size_t n = std::min<uint64_t>(staging.size(), t->numel - done);
      ConvertFp32ToBf16(src + done, staging.data(), n);
      ZS_RETURN_IF_ERROR(out.Append(staging.data(), n * sizeof(uint16_t)));
      done += n;
    }
  }
  return out.Commit();
}

}  // namespace zeroshard::io
