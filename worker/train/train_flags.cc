#include "worker/train/train_flags.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "worker/config/ds_options.h"
#include "worker/engine/zero_options.h"
#include "worker/gpt2/engine_model.h"
#include "worker/io/model_file.h"

namespace zeroshard::train {
namespace {

constexpr int64_t kIntMax = std::numeric_limits<int>::max();

absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError(message);
}

// OK when `lo` <= `value` <= `hi`, else "--<name> must be in [lo, hi]".
absl::Status InRange(const char* name, int64_t value, int64_t lo, int64_t hi) {
  if (value >= lo && value <= hi) return absl::OkStatus();
  return Invalid(
      absl::StrCat("--", name, " ", value, " must be in [", lo, ", ", hi, "]"));
}

gpt2::Config ShapeConfig(const TrainFlags& f) {
  const int64_t max_t = f.max_seq_len > 0 ? f.max_seq_len : f.seq_len;
  return {static_cast<int>(max_t),   static_cast<int>(f.vocab),
          static_cast<int>(f.vocab), static_cast<int>(f.layers),
          static_cast<int>(f.heads), static_cast<int>(f.channels)};
}

absl::Status ValidateShape(const TrainFlags& f) {
  ZS_RETURN_IF_ERROR(InRange("layers", f.layers, 1, kIntMax));
  ZS_RETURN_IF_ERROR(InRange("heads", f.heads, 1, kIntMax));
  ZS_RETURN_IF_ERROR(InRange("channels", f.channels, 1, kIntMax));
  ZS_RETURN_IF_ERROR(InRange("vocab", f.vocab, 1, kIntMax));
  ZS_RETURN_IF_ERROR(InRange("max_seq_len", f.max_seq_len, 0, kIntMax));
  if (f.channels % f.heads != 0) {
    return Invalid(absl::StrCat("--heads ", f.heads,
                                " does not divide --channels ", f.channels));
  }
  if (f.max_seq_len > 0 && f.seq_len > f.max_seq_len) {
    return Invalid(absl::StrCat("--seq_len ", f.seq_len,
                                " exceeds --max_seq_len ", f.max_seq_len));
  }
  absl::Status s = gpt2::ValidateConfig(ShapeConfig(f));
  if (!s.ok()) {
    return Invalid(
        absl::StrCat("--layers/--heads/--channels/--vocab: ", s.message()));
  }
  return absl::OkStatus();
}

}  // namespace

bool operator==(const TrainFlags& a, const TrainFlags& b) {
  const ClientSecurityFlags &s = a.security, &t = b.security;
  return a.config == b.config && a.data == b.data &&
         a.model_file == b.model_file && a.layers == b.layers &&
         a.heads == b.heads && a.channels == b.channels && a.vocab == b.vocab &&
         a.max_seq_len == b.max_seq_len && a.seq_len == b.seq_len &&
         a.steps == b.steps && a.seed == b.seed && a.threads == b.threads &&
         a.init_std == b.init_std && a.save == b.save &&
         a.checkpoint_interval == b.checkpoint_interval &&
         a.device == b.device &&
         a.activation_checkpointing == b.activation_checkpointing &&
         a.job_id == b.job_id && a.val_data == b.val_data &&
         a.eval_every == b.eval_every && s.tls_ca == t.tls_ca &&
         s.tls_cert == t.tls_cert && s.tls_key == t.tls_key &&
         s.token_file == t.token_file && s.insecure == t.insecure &&
         a.autos == b.autos;
}

void AddTrainFlags(FlagSet* flags, TrainFlags* f) {
  flags->String("config", &f->config, "DeepSpeed JSON config (required)");
  flags->String("data", &f->data,
                "token files or patterns, comma-separated (llm.c format); "
                "zeroshard train needs them, a worker without them trains on "
                "synthetic tokens of --seed");
  flags->String("model_file", &f->model_file,
                "initial model (llm.c format; its header gives the shape); "
                "else a seeded GPT-2 of --layers/--heads/--channels/--vocab/"
                "--max_seq_len");
  flags->Int64("layers", &f->layers, "transformer blocks L (no --model_file)");
  flags->Int64("heads", &f->heads,
               "attention heads per block (no --model_file; must divide "
               "--channels)");
  flags->Int64("channels", &f->channels, "channels C (no --model_file)");
  flags->Int64("vocab", &f->vocab, "vocabulary V (no --model_file)");
  flags->Int64("max_seq_len", &f->max_seq_len,
               "positions maxT of the model (no --model_file); 0: --seq_len");
  flags->Int64("seq_len", &f->seq_len, "sequence length T");
  flags->Int64("steps", &f->steps, "optimizer steps S");
  flags->Int64("seed", &f->seed,
               "seeded initial weights (and synthetic tokens)");
  flags->Double("init_std", &f->init_std, "std of matrices at seeded init");
  flags->Int64("threads", &f->threads, "CPU kernel threads per worker");
  flags->String("save", &f->save,
                "the final model goes here (llm.c format, fp32; written by "
                "rank 0)");
  flags->Int64("checkpoint_interval", &f->checkpoint_interval,
               "checkpoint every N steps (-1: the config's "
               "zeroshard.checkpoint_interval; the servers need "
               "--checkpoint_dir); resumes from the newest checkpoint and "
               "rolls back when a server restarts");
  flags->String("device", &f->device,
                "where the model computes: cpu, cuda (the GPU; docs/cuda.md) "
                "or host-emulated (the GPU path on host memory, for tests); "
                "empty: the config's zeroshard.device, else cpu");
  flags->Bool("activation_checkpointing", &f->activation_checkpointing,
              "keep only each transformer block's input and recompute its "
              "forward in backward: less activation memory (on a GPU, most "
              "of it) for about one more forward of compute; the same bits");
  flags->String("job_id", &f->job_id, "job id on the servers");
  flags->String("val_data", &f->val_data,
                "held-out token files or patterns, comma-separated (e.g. "
                "zeroshard-tokenize --val_fraction's --val_output): rank 0 "
                "evaluates on up to 8 batches of its first file; empty: on "
                "the first batch of the training data");
  flags->Int64("eval_every", &f->eval_every,
               "eval loss every N steps and at the last (0: about 20 evals "
               "per run; -1: only at the end)");
  AddClientSecurityFlags(flags, &f->security);
  config::AddAutoFlags(flags, &f->autos);
}

absl::Status ValidateTrainFlags(const TrainFlags& f) {
  if (f.config.empty()) return Invalid("--config is required (DeepSpeed JSON)");
  ZS_RETURN_IF_ERROR(InRange("seq_len", f.seq_len, 1, kIntMax));
  ZS_RETURN_IF_ERROR(InRange("steps", f.steps, 1, kIntMax));
  ZS_RETURN_IF_ERROR(InRange("threads", f.threads, 1, 1024));
  ZS_RETURN_IF_ERROR(
      InRange("checkpoint_interval", f.checkpoint_interval, -1, kIntMax));
  if (!std::isfinite(f.init_std) || f.init_std < 0) {
    return Invalid(absl::StrCat("--init_std ", f.init_std,
                                " must be a finite number >= 0"));
  }
  if (f.job_id.empty()) return Invalid("--job_id must not be empty");
  if (!f.device.empty()) {
    absl::Status s = gpt2::ValidateDeviceKind(f.device);
    if (!s.ok()) return Invalid(absl::StrCat("--", s.message()));
  }
  ZS_RETURN_IF_ERROR(InRange("eval_every", f.eval_every, -1, kIntMax));
  if (f.model_file.empty()) ZS_RETURN_IF_ERROR(ValidateShape(f));
  return absl::OkStatus();
}

absl::StatusOr<gpt2::Config> ModelFromFlags(const TrainFlags& f) {
  if (f.model_file.empty()) {
    ZS_RETURN_IF_ERROR(ValidateShape(f));
    return ShapeConfig(f);
  }
  ZS_ASSIGN_OR_RETURN(io::ModelFileInfo info,
                      io::ReadModelFileInfo(f.model_file));
  if (f.seq_len > info.config.max_seq_len) {
    return Invalid(absl::StrCat("--seq_len ", f.seq_len,
                                " exceeds the model file's max_seq_len ",
                                info.config.max_seq_len));
  }
  return info.config;
}

absl::StatusOr<config::EngineConfig> ParseConfigForFlags(
    const TrainFlags& f, int world_size, std::vector<std::string>* warnings) {
  config::AutoInputs in = f.autos;
  in.steps = f.steps;
  // The hidden size fills "auto" keys: a model the flags cannot give is
  // the error to report (not the "auto" it leaves unfilled).
  ZS_ASSIGN_OR_RETURN(const gpt2::Config model, ModelFromFlags(f));
  in.hidden_size = model.channels;
  in.hidden_size_from = f.model_file.empty() ? "--channels" : "--model_file";
  return config::ParseDeepSpeedConfigFile(f.config, world_size, in, warnings);
}

absl::StatusOr<TrainSpec> TrainSpecFromFlags(
    const TrainFlags& f, const config::EngineConfig& config,
    std::vector<std::string>* warnings) {
  TrainSpec spec;
  ZS_ASSIGN_OR_RETURN(spec.config, ModelFromFlags(f));
  if (!f.model_file.empty()) spec.init_file = f.model_file;
  ZS_ASSIGN_OR_RETURN(engine::ModelLayout layout,
                      gpt2::EngineLayout(spec.config));
  auto zero = config::ZeroOptionsFromConfig(
      config, layout, static_cast<int>(f.seq_len), warnings);
  if (!zero.ok()) {
    return absl::Status(zero.status().code(),
                        absl::StrCat(f.config, ": ", zero.status().message()));
  }
  spec.zero = *std::move(zero);
  spec.zero.job_id = f.job_id;
  spec.zero.threads = static_cast<int>(f.threads);
  spec.device = f.device.empty() ? config.zeroshard.device : f.device;
  spec.activation_checkpointing = f.activation_checkpointing;
  if (f.checkpoint_interval >= 0) {
    spec.zero.checkpoint_interval = static_cast<int>(f.checkpoint_interval);
    absl::Status s = engine::ValidateZeroOptions(spec.zero);
    if (!s.ok()) {
      return Invalid(absl::StrCat("--checkpoint_interval ",
                                  f.checkpoint_interval, ": ", s.message()));
    }
  }
  spec.steps = static_cast<int>(f.steps);
  spec.seed = static_cast<uint64_t>(f.seed);
  spec.init_std = f.init_std;
  spec.data = absl::StrSplit(f.data, ',', absl::SkipEmpty());
  return spec;
}

std::vector<std::string> TrainFlagsArgv(const TrainFlags& f) {
  const TrainFlags d;
  std::vector<std::string> argv;
  auto text = [&](const char* name, const std::string& v,
                  const std::string& dv) {
    if (v != dv) argv.push_back(absl::StrCat("--", name, "=", v));
  };
  auto number = [&](const char* name, int64_t v, int64_t dv) {
    if (v != dv) argv.push_back(absl::StrCat("--", name, "=", v));
  };
  text("config", f.config, d.config);
  text("data", f.data, d.data);
  text("model_file", f.model_file, d.model_file);
  number("layers", f.layers, d.layers);
  number("heads", f.heads, d.heads);
  number("channels", f.channels, d.channels);
  number("vocab", f.vocab, d.vocab);
  number("max_seq_len", f.max_seq_len, d.max_seq_len);
  number("seq_len", f.seq_len, d.seq_len);
  number("steps", f.steps, d.steps);
  number("seed", f.seed, d.seed);
  number("threads", f.threads, d.threads);
  if (f.init_std != d.init_std) {  // %.17g: read back to the same double
    argv.push_back(absl::StrFormat("--init_std=%.17g", f.init_std));
  }
  text("save", f.save, d.save);
  number("checkpoint_interval", f.checkpoint_interval, d.checkpoint_interval);
  text("device", f.device, d.device);
  if (f.activation_checkpointing) argv.push_back("--activation_checkpointing");
  text("job_id", f.job_id, d.job_id);
  text("val_data", f.val_data, d.val_data);
  number("eval_every", f.eval_every, d.eval_every);
  for (std::string& a : ClientSecurityArgs(f.security)) {
    argv.push_back(std::move(a));
  }
  for (std::string& a : config::AutoFlagsArgv(f.autos)) {
    argv.push_back(std::move(a));
  }
  return argv;
}

}  // namespace zeroshard::train
