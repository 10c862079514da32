#include "ctl/model_commands.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "worker/io/model_file.h"

namespace zeroshard::ctl {
namespace {

constexpr int kTensorsPerBlock = 12;
constexpr int kTensorsOutsideBlocks = 4;  // wte, wpe, lnfw, lnfb

absl::Status NotGpt2(const std::string& why) {
  return absl::InvalidArgumentError(
      absl::StrCat("the registered model is not a GPT-2 layout: ", why));
}

// The 2-d shape of tensor `i` named `name`, or an error.
absl::Status Expect2d(const v1::ModelSpec& spec, int i, const char* name) {
  const v1::TensorSpec& t = spec.tensors(i);
  if (t.name() != name || t.shape_size() != 2) {
    return NotGpt2(absl::StrCat("tensor ", i, " is '", t.name(), "' ",
                                absl::StrJoin(t.shape(), "x"), ", not '", name,
                                "' (2-d)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<gpt2::Config> ConfigFromSpec(const v1::ModelSpec& spec,
                                            int64_t heads, int64_t vocab) {
  const int n = spec.tensors_size();
  if (n < kTensorsOutsideBlocks ||
      (n - kTensorsOutsideBlocks) % kTensorsPerBlock != 0) {
    return NotGpt2(absl::StrCat(n, " tensors, not 4 + 12 per block"));
  }
  ZS_RETURN_IF_ERROR(Expect2d(spec, 0, "wte"));
  ZS_RETURN_IF_ERROR(Expect2d(spec, 1, "wpe"));
  gpt2::Config c;
  c.padded_vocab_size = static_cast<int>(spec.tensors(0).shape(0));
  c.channels = static_cast<int>(spec.tensors(0).shape(1));
  c.max_seq_len = static_cast<int>(spec.tensors(1).shape(0));
  c.num_layers = (n - kTensorsOutsideBlocks) / kTensorsPerBlock;
  if (heads <= 0 || (c.channels > 0 && c.channels % heads != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--heads ", heads, " does not divide the model's ",
                     c.channels, " channels"));
  }
  if (vocab < 0 || vocab > c.padded_vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("--vocab ", vocab, " is not in [0, the model's ",
                     c.padded_vocab_size, " embedding rows]"));
  }
  c.num_heads = static_cast<int>(heads);
  c.vocab_size = vocab == 0 ? c.padded_vocab_size : static_cast<int>(vocab);
  absl::StatusOr<gpt2::ParamLayout> layout = gpt2::ParamLayout::Create(c);
  if (!layout.ok()) return NotGpt2(std::string(layout.status().message()));
  const std::string difference =
      DescribeLayoutDifference(spec, *layout, "GPT-2");
  if (!difference.empty()) return NotGpt2(difference);
  return c;
}

std::string DescribeLayoutDifference(const v1::ModelSpec& spec,
                                     const gpt2::ParamLayout& layout,
                                     const std::string& other) {
  const std::vector<gpt2::ParamTensor>& tensors = layout.tensors();
  const size_t n = std::max<size_t>(spec.tensors_size(), tensors.size());
  for (size_t i = 0; i < n; ++i) {
    std::string want = "(none)", got = "(none)";
    if (i < static_cast<size_t>(spec.tensors_size())) {
      const v1::TensorSpec& t = spec.tensors(static_cast<int>(i));
      want = absl::StrCat("'", t.name(), "' ", absl::StrJoin(t.shape(), "x"));
    }
    if (i < tensors.size()) {
      got = absl::StrCat("'", tensors[i].name, "' ",
                         absl::StrJoin(tensors[i].shape, "x"));
    }
    if (want != got) {
      return absl::StrCat("tensor ", i, ": registered ", want, ", ", other, " ",
                          got);
    }
  }
  return "";
}

absl::StatusOr<std::string> ExportModel(ShardClient& client,
                                        const std::string& path, int64_t heads,
                                        int64_t vocab) {
  ZS_ASSIGN_OR_RETURN(gpt2::Config config,
                      ConfigFromSpec(client.spec(), heads, vocab));
  ZS_ASSIGN_OR_RETURN(gpt2::ParamLayout layout,
                      gpt2::ParamLayout::Create(config));
  std::vector<float> params(layout.num_params());
  uint64_t step = 0;
  ZS_RETURN_IF_ERROR(client.Gather(Range{0, layout.num_params()},
                                   v1::DTYPE_FP32, params.data(), &step));
  ZS_RETURN_IF_ERROR(io::WriteModelFile(path, layout, params.data()));
  return absl::StrCat("exported step ", step, " of job '",
                      client.spec().job_id(), "' (",
                      gpt2::DescribeConfig(config), ", ", layout.num_params(),
                      " parameters) to ", path);
}

absl::Status CheckModelFile(const std::string& path) {
  return io::ReadModelFileInfo(path).status();
}

absl::StatusOr<std::string> ImportModel(ShardClient& client,
                                        const std::string& path) {
  ZS_ASSIGN_OR_RETURN(io::ModelFileInfo info, io::ReadModelFileInfo(path));
  ZS_ASSIGN_OR_RETURN(gpt2::ParamLayout layout,
                      gpt2::ParamLayout::Create(info.config));
  const std::string difference =
      DescribeLayoutDifference(client.spec(), layout, "file");
  if (!difference.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " (", gpt2::DescribeConfig(info.config),
                     ") does not fit the registered model: ", difference));
  }
  std::vector<float> params(layout.num_params());
  ZS_RETURN_IF_ERROR(io::ReadModelParams(path, layout, params.data()));
  ZS_RETURN_IF_ERROR(
      client.WriteParameters(Range{0, layout.num_params()}, params.data()));
  return absl::StrCat("imported ", layout.num_params(), " parameters (",
                      gpt2::DescribeConfig(info.config), ") from ", path,
                      " into job '", client.spec().job_id(), "'");
}

}  // namespace zeroshard::ctl
