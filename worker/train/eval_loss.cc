#include "worker/train/eval_loss.h"

#include <string>

#include "common/status_macros.h"
#include "worker/gpt2/model.h"
#include "worker/io/data_loader.h"
#include "worker/io/token_file.h"

namespace zeroshard::train {

absl::StatusOr<std::optional<EvalResult>> EvalLoss(
    const TrainSpec& spec, const std::vector<float>& params) {
  if (spec.data.empty()) return std::nullopt;
  ZS_ASSIGN_OR_RETURN(std::vector<std::string> files,
                      io::ExpandFilePatterns(spec.data));
  if (files.empty()) return std::nullopt;
  ZS_ASSIGN_OR_RETURN(io::TokenFile file, io::TokenFile::Open(files[0]));
  const int B = spec.zero.micro_batch, T = spec.zero.seq_len;
  const int64_t n = static_cast<int64_t>(B) * T;
  if (file.num_tokens() < n + 1) return std::nullopt;
  std::vector<uint16_t> raw(n + 1);
  ZS_RETURN_IF_ERROR(file.Read(0, raw.size(), raw.data()));
  std::vector<int> inputs(raw.begin(), raw.end() - 1);
  std::vector<int> targets(raw.begin() + 1, raw.end());
  std::vector<float> p = params;  // the model takes a mutable buffer
  gpt2::ModelOptions mo;
  mo.threads = spec.zero.threads;
  mo.params = absl::MakeSpan(p);
  ZS_ASSIGN_OR_RETURN(auto model, gpt2::Model::Create(spec.config, B, T, mo));
  ZS_ASSIGN_OR_RETURN(float loss, model->Forward(inputs, targets));
  return EvalResult{loss, n};
}

}  // namespace zeroshard::train
