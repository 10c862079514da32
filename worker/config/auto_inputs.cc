#include "worker/config/auto_inputs.h"

#include <cmath>
#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"

namespace zeroshard::config {
namespace {

bool Given(double v) { return !std::isnan(v); }

bool SameDouble(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || a == b;
}

absl::Status Bad(absl::string_view flag, absl::string_view want,
                 absl::string_view got) {
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, " must be ", want, ", got ", got));
}

}  // namespace

bool operator==(const AutoInputs& a, const AutoInputs& b) {
  return a.per_device_train_batch_size == b.per_device_train_batch_size &&
         a.gradient_accumulation_steps == b.gradient_accumulation_steps &&
         SameDouble(a.learning_rate, b.learning_rate) &&
         SameDouble(a.adam_beta1, b.adam_beta1) &&
         SameDouble(a.adam_beta2, b.adam_beta2) &&
         SameDouble(a.adam_epsilon, b.adam_epsilon) &&
         SameDouble(a.weight_decay, b.weight_decay) &&
         a.warmup_steps == b.warmup_steps &&
         SameDouble(a.max_grad_norm, b.max_grad_norm) &&
         a.precision == b.precision && a.steps == b.steps &&
         a.hidden_size == b.hidden_size &&
         a.hidden_size_from == b.hidden_size_from;
}

void AddAutoFlags(FlagSet* flags, AutoInputs* in) {
  flags->Int64("per_device_train_batch_size", &in->per_device_train_batch_size,
               "fills an \"auto\" train_micro_batch_size_per_gpu (-1: unset)");
  flags->Int64("gradient_accumulation_steps", &in->gradient_accumulation_steps,
               "fills an \"auto\" gradient_accumulation_steps (-1: unset)");
  flags->Double("learning_rate", &in->learning_rate,
                "fills an \"auto\" optimizer.params.lr and "
                "scheduler.params.warmup_max_lr (nan: unset)");
  flags->Double("adam_beta1", &in->adam_beta1,
                "fills an \"auto\" optimizer.params.betas[0] (unset: 0.9)");
  flags->Double("adam_beta2", &in->adam_beta2,
                "fills an \"auto\" optimizer.params.betas[1] (unset: 0.999)");
  flags->Double("adam_epsilon", &in->adam_epsilon,
                "fills an \"auto\" optimizer.params.eps (unset: 1e-8)");
  flags->Double("weight_decay", &in->weight_decay,
                "fills an \"auto\" optimizer.params.weight_decay (unset: 0)");
  flags->Int64("warmup_steps", &in->warmup_steps,
               "fills an \"auto\" scheduler.params.warmup_num_steps "
               "(unset: 0)");
  flags->Double("max_grad_norm", &in->max_grad_norm,
                "fills an \"auto\" gradient_clipping (unset: 1.0)");
  flags->String("precision", &in->precision,
                "fp32, fp16 or bf16: fills \"auto\" fp16.enabled and "
                "bf16.enabled");
}

std::vector<std::string> AutoFlagsArgv(const AutoInputs& in) {
  std::vector<std::string> out;
  const auto add_int = [&](const char* name, int64_t v) {
    if (v != -1) out.push_back(absl::StrCat("--", name, "=", v));
  };
  const auto add_double = [&](const char* name, double v) {
    // %.17g: the value parses back bit for bit.
    if (Given(v)) {
      char buf[40];
      std::snprintf(buf, sizeof(buf), "%.17g", v);
      out.push_back(absl::StrCat("--", name, "=", buf));
    }
  };
  add_int("per_device_train_batch_size", in.per_device_train_batch_size);
  add_int("gradient_accumulation_steps", in.gradient_accumulation_steps);
  add_double("learning_rate", in.learning_rate);
  add_double("adam_beta1", in.adam_beta1);
  add_double("adam_beta2", in.adam_beta2);
  add_double("adam_epsilon", in.adam_epsilon);
  add_double("weight_decay", in.weight_decay);
  add_int("warmup_steps", in.warmup_steps);
  add_double("max_grad_norm", in.max_grad_norm);
  if (!in.precision.empty()) out.push_back("--precision=" + in.precision);
  return out;
}

absl::Status ValidateAutoInputs(const AutoInputs& in) {
  for (const auto& [flag, v] :
       {std::pair<const char*, int64_t>{"per_device_train_batch_size",
                                        in.per_device_train_batch_size},
        {"gradient_accumulation_steps", in.gradient_accumulation_steps}}) {
    if (v != -1 && v < 1) return Bad(flag, ">= 1", absl::StrCat(v));
  }
  if (in.warmup_steps < -1) {
    return Bad("warmup_steps", ">= 0", absl::StrCat(in.warmup_steps));
  }
  for (const auto& [flag, v] :
       {std::pair<const char*, double>{"learning_rate", in.learning_rate},
        {"adam_epsilon", in.adam_epsilon},
        {"weight_decay", in.weight_decay},
        {"max_grad_norm", in.max_grad_norm}}) {
    if (Given(v) && !(std::isfinite(v) && v >= 0)) {
      return Bad(flag, "finite and >= 0", absl::StrCat(v));
    }
  }
  for (const auto& [flag, v] :
       {std::pair<const char*, double>{"adam_beta1", in.adam_beta1},
        {"adam_beta2", in.adam_beta2}}) {
    if (Given(v) && !(v >= 0 && v < 1)) {
      return Bad(flag, "in [0, 1)", absl::StrCat(v));
    }
  }
  if (!in.precision.empty() && in.precision != "fp32" &&
      in.precision != "fp16" && in.precision != "bf16") {
    return Bad("precision", "fp32, fp16 or bf16",
               absl::StrCat("\"", in.precision, "\""));
  }
  return absl::OkStatus();
}

absl::StatusOr<AutoInputs> ParseAutoInputs(absl::string_view args) {
  AutoInputs in;
  FlagSet flags("inputs", "--learning_rate=3e-4 --steps=1000 ...");
  AddAutoFlags(&flags, &in);
  flags.Int64("steps", &in.steps, "the run's steps");
  flags.Int64("hidden_size", &in.hidden_size, "the model's hidden size");
  std::vector<std::string> words =
      absl::StrSplit(args, absl::ByAnyChar(" \t\n"), absl::SkipEmpty());
  std::vector<char*> argv = {const_cast<char*>("inputs")};
  for (std::string& w : words) argv.push_back(w.data());
  ZS_ASSIGN_OR_RETURN(std::vector<std::string> rest,
                      flags.Parse(static_cast<int>(argv.size()), argv.data()));
  if (flags.help_requested()) {
    return absl::InvalidArgumentError("inputs: --help is not an input");
  }
  if (!rest.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("inputs: '", rest[0], "' is not a --flag=value"));
  }
  if (in.steps < -1 || in.steps == 0) {
    return Bad("steps", ">= 1", absl::StrCat(in.steps));
  }
  if (in.hidden_size < -1 || in.hidden_size == 0) {
    return Bad("hidden_size", ">= 1", absl::StrCat(in.hidden_size));
  }
  if (in.hidden_size > 0) in.hidden_size_from = "--hidden_size";
  ZS_RETURN_IF_ERROR(ValidateAutoInputs(in));
  return in;
}

}  // namespace zeroshard::config
