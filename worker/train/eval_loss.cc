#include "worker/train/eval_loss.h"

#include <algorithm>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "worker/gpt2/engine_model.h"
#include "worker/gpt2/model.h"
#include "worker/io/data_loader.h"
#include "worker/io/token_file.h"
#include "worker/train/run_metrics.h"

namespace zeroshard::train {

int64_t EvalSet::tokens() const {
  return inputs.empty()
             ? 0
             : static_cast<int64_t>(inputs.size() * inputs[0].size());
}

absl::StatusOr<std::optional<EvalSet>> OpenEvalSet(
    const TrainSpec& spec, const std::string& val_data) {
  EvalSet set;
  set.held_out = !val_data.empty();
  std::vector<std::string> patterns = spec.data;
  if (set.held_out) {
    patterns = absl::StrSplit(val_data, ',', absl::SkipEmpty());
  }
  if (patterns.empty()) return std::nullopt;
  absl::StatusOr<std::vector<std::string>> files =
      io::ExpandFilePatterns(patterns);
  if (set.held_out && (!files.ok() || files->empty())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--val_data ", val_data, " names no token file",
        files.ok() ? "" : absl::StrCat(": ", files.status().message())));
  }
  ZS_RETURN_IF_ERROR(files.status());
  if (files->empty()) return std::nullopt;
  set.file = (*files)[0];
  absl::StatusOr<io::TokenFile> opened = io::TokenFile::Open(set.file);
  if (!opened.ok() && set.held_out) {
    return absl::Status(
        opened.status().code(),
        absl::StrCat("--val_data: ", opened.status().message()));
  }
  ZS_RETURN_IF_ERROR(opened.status());
  io::TokenFile& file = *opened;
  const int64_t n =
      static_cast<int64_t>(spec.zero.micro_batch) * spec.zero.seq_len;
  const int64_t batches =
      set.held_out
          ? std::min<int64_t>(kMaxEvalBatches, (file.num_tokens() - 1) / n)
          : 1;
  if (file.num_tokens() < n + 1) {
    if (!set.held_out) return std::nullopt;
    return absl::InvalidArgumentError(
        absl::StrCat("--val_data ", set.file, " has ", file.num_tokens(),
                     " tokens, fewer than one eval batch B*T + 1 = ", n + 1));
  }
  // Batch i starts at i * stride: (batches - 1) * stride + n + 1 <=
  // num_tokens since stride * batches <= num_tokens - 1 and stride >= n.
  const int64_t stride = (file.num_tokens() - 1) / batches;
  std::vector<uint16_t> raw(n + 1);
  for (int64_t i = 0; i < batches; ++i) {
    ZS_RETURN_IF_ERROR(file.Read(i * stride, raw.size(), raw.data()));
    set.inputs.emplace_back(raw.begin(), raw.end() - 1);
    set.targets.emplace_back(raw.begin() + 1, raw.end());
  }
  return std::optional<EvalSet>(std::move(set));
}

absl::StatusOr<EvalResult> EvalLoss(const TrainSpec& spec, const EvalSet& set,
                                    const std::vector<float>& params) {
  // On the training's device (declared before the model, which it
  // outlives), else in host memory.
  const int B = spec.zero.micro_batch, T = spec.zero.seq_len;
  ZS_ASSIGN_OR_RETURN(
      std::unique_ptr<gpt2::Device> device,
      gpt2::CreateDevice(spec.device, spec.config, B, T, spec.zero.threads,
                         /*bf16=*/false, spec.local_rank));
  std::vector<float> p;
  gpt2::ModelOptions mo;
  mo.threads = spec.zero.threads;
  mo.device = device.get();
  if (device == nullptr) {
    p = params;  // the model takes a mutable buffer
    mo.params = absl::MakeSpan(p);
  }
  ZS_ASSIGN_OR_RETURN(auto model, gpt2::Model::Create(spec.config, B, T, mo));
  if (device != nullptr) {
    if (params.size() != model->params().size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("eval: ", params.size(), " parameters for a model of ",
                       model->params().size()));
    }
    ZS_RETURN_IF_ERROR(device->ToDevice(model->params().data(), params.data(),
                                        params.size() * sizeof(float)));
  }
  double sum = 0;
  for (size_t i = 0; i < set.inputs.size(); ++i) {
    absl::StatusOr<float> loss = model->Forward(set.inputs[i], set.targets[i]);
    if (!loss.ok()) {
      return absl::Status(
          loss.status().code(),
          absl::StrCat("eval on ", set.file, ": ", loss.status().message()));
    }
    sum += *loss;
  }
  EvalResult r;
  r.loss = static_cast<float>(sum / std::max<size_t>(set.inputs.size(), 1));
  r.tokens = set.tokens();
  r.held_out = set.held_out;
  return r;
}

int64_t EvalPeriod(int64_t eval_every, int64_t steps) {
  if (eval_every > 0) return eval_every;
  if (eval_every < 0) return std::max<int64_t>(steps, 1);
  return std::max<int64_t>((steps + 19) / 20, 1);
}

bool IsEvalStep(int64_t step, int64_t steps, int64_t period) {
  return step == steps || (period > 0 && step % period == 0);
}

std::string EvalRecord(int64_t step, const EvalResult& r) {
  return absl::StrCat("{\"event\":\"eval\",\"step\":", step,
                      ",\"loss\":", JsonDouble(r.loss, 7),
                      ",\"tokens\":", r.tokens,
                      ",\"held_out\":", r.held_out ? "true" : "false", "}");
}

}  // namespace zeroshard::train
