// The sections of a DeepSpeed config other than the batch sizes; see
// ds_config.h for the rules.
#include "worker/config/ds_config_sections.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/hostname.h"
#include "common/status_macros.h"
#include "google/protobuf/struct.pb.h"

namespace zeroshard::config::internal {
namespace {

using Bound = ObjectReader::Bound;

struct Unused {
  const char* key;
  const char* why;
};

// DeepSpeed keys that have no meaning here; present ones draw a warning.
constexpr Unused kUnusedTopLevel[] = {
    {"steps_per_print", "the launcher reports progress"},
    {"wall_clock_breakdown", "no DeepSpeed timers"},
    {"memory_breakdown", "no DeepSpeed timers"},
    {"dump_state", "no DeepSpeed engine"},
    {"zero_allow_untested_optimizer", "the servers run AdamW"},
    {"zero_force_ds_cpu_optimizer", "the servers run AdamW"},
    {"prescale_gradients", "gradients are averaged once, in fp32"},
    {"gradient_predivide_factor", "gradients are averaged once, in fp32"},
    {"communication_data_type", "gradients travel in the training dtype"},
    {"seq_parallel_communication_data_type", "no sequence parallelism"},
    {"sequence_parallel_size", "no sequence parallelism: data parallel only"},
    {"tensor_parallel", "no tensor parallelism: data parallel only"},
    {"compile", "no DeepSpeed compiler"},
    {"graph_harvesting", "a DeepSpeed implementation detail"},
    {"use_node_local_storage", "the shard servers checkpoint themselves"},
    {"timers", "no DeepSpeed timers"},
    {"weight_quantization", "no quantized weights"},
    {"fp32_allreduce", "gradients are reduced in fp32 always"},
    {"sparse_gradients", "gradients are dense"},
    {"amp", "use fp16 or bf16"},
    {"activation_checkpointing",
     "a model setting: zeroshard train --activation_checkpointing"},
    {"flops_profiler", "no DeepSpeed profiler"},
    {"comms_logger", "no DeepSpeed monitor"},
    {"checkpoint", "the shard servers checkpoint themselves"},
    {"elasticity", "workers join and leave without it"},
    {"data_types",
     "zeroshard-worker accumulates gradients in fp32, Python in the "
     "module's dtype"},
    // DeepSpeed training features zeroshard does not implement: the run
    // trains without them, which the warning says.
    {"curriculum_learning", "not implemented: the run trains without it"},
    {"data_efficiency", "not implemented: the run trains without it"},
    {"progressive_layer_drop", "not implemented: the run trains without it"},
    {"compression_training", "not implemented: the run trains without it"},
    {"quantize_training", "not implemented: the run trains without it"},
    {"sparse_attention", "not implemented: the run trains without it"},
    {"eigenvalue", "not implemented: the run trains without it"},
    {"pipeline", "no pipeline parallelism: data parallel only"},
    {"hybrid_engine", "no DeepSpeed-Chat hybrid engine"},
    {"autotuning", "no DeepSpeed autotuner"},
    {"nebula", "the shard servers checkpoint themselves"},
};

constexpr Unused kUnusedZero[] = {
    {"allgather_partitions", "a DeepSpeed implementation detail"},
    {"load_from_fp32_weights", "the servers keep fp32 master weights"},
    {"elastic_checkpoint", "the servers own the optimizer state"},
    {"round_robin_gradients", "a DeepSpeed implementation detail"},
    {"ignore_unused_parameters", "a DeepSpeed implementation detail"},
    {"use_multi_rank_bucket_allreduce", "a DeepSpeed implementation detail"},
    {"memory_efficient_linear", "a DeepSpeed implementation detail"},
    {"stage3_gather_16bit_weights_on_model_save",
     "models are saved from the servers"},
    {"stage3_gather_fp16_weights_on_model_save",
     "models are saved from the servers"},
    {"stage3_model_persistence_threshold", "a DeepSpeed implementation detail"},
    {"model_persistence_threshold", "a DeepSpeed implementation detail"},
    {"disable_allgather", "a DeepSpeed implementation detail"},
    {"zero_hpz_partition_size", "no hierarchical partitioning"},
    {"zero_quantized_weights", "no quantized communication"},
    {"zero_quantized_nontrainable_weights", "no quantized communication"},
    {"zero_quantized_gradients", "no quantized communication"},
    {"mics_shard_size", "no MiCS"},
    {"mics_hierarchical_params_gather", "no MiCS"},
    {"cpu_offload", "deprecated; optimizer state lives on the servers"},
    {"cpu_offload_param", "deprecated; use offload_param"},
    {"cpu_offload_use_pin_memory", "deprecated"},
    {"stage3_module_granularity_threshold",
     "a DeepSpeed implementation detail"},
    {"stage3_use_all_reduce_for_fetch_params",
     "a DeepSpeed implementation detail"},
    {"stage3_allgather_sequential", "a DeepSpeed implementation detail"},
    {"enable_sanity_checks", "a DeepSpeed implementation detail"},
    {"leaf_module", "a DeepSpeed implementation detail"},
    {"log_trace_cache_warnings", "a DeepSpeed implementation detail"},
    {"override_module_apply", "a DeepSpeed implementation detail"},
    {"pipeline_loading_checkpoint", "the servers own the optimizer state"},
    {"legacy_stage1", "one stage 1, the servers'"},
    {"save_muon_momentum_buffer_in_memory", "the servers run AdamW"},
    {"zenflow", "no ZenFlow: the servers run every update"},
    {"zeropp_loco_param", "no quantized communication"},
};

// Keys read into ZeroConfig (typed, reported) that no part of zeroshard
// acts on: present ones draw a warning too.
constexpr Unused kReadButUnusedZero[] = {
    {"contiguous_gradients",
     "gradients are always reduced in one contiguous buffer"},
    {"reduce_scatter", "stages 1-2 always reduce-scatter the gradients"},
    {"sub_group_size",
     "the servers' optimizer sub-groups are zeroshard-server's "
     "--sub_group_size"},
};

constexpr Unused kUnusedOffloadParam[] = {
    {"pin_memory", "a DeepSpeed implementation detail"},
    {"buffer_count", "a DeepSpeed implementation detail"},
    {"buffer_size", "a DeepSpeed implementation detail"},
    {"max_in_cpu", "a DeepSpeed implementation detail"},
};

constexpr Unused kUnusedOffloadNvme[] = {
    {"pin_memory", "a DeepSpeed implementation detail"},
    {"buffer_count", "a DeepSpeed implementation detail"},
    {"buffer_size", "a DeepSpeed implementation detail"},
    {"max_in_cpu", "a DeepSpeed implementation detail"},
    {"fast_init", "a DeepSpeed implementation detail"},
    {"ratio", "the servers hold all of the optimizer state"},
    {"pipeline", "the servers pipeline their NVMe I/O always"},
    {"pipeline_read", "the servers pipeline their NVMe I/O always"},
    {"pipeline_write", "the servers pipeline their NVMe I/O always"},
};

template <size_t N>
void IgnoreAll(ObjectReader& reader, const Unused (&keys)[N]) {
  for (const Unused& u : keys) reader.Ignore(u.key, u.why);
}

absl::StatusOr<engine::WarmupType> ParseWarmupType(ObjectReader& params) {
  ZS_ASSIGN_OR_RETURN(std::string type, params.String("warmup_type", "log"));
  if (type == "log") return engine::WarmupType::kLog;
  if (type == "linear") return engine::WarmupType::kLinear;
  return params.Error("warmup_type", absl::StrCat("must be \"log\" or "
                                                  "\"linear\", got \"",
                                                  type, "\""));
}

// total_num_steps of WarmupDecayLR / WarmupCosineLR: required, and
// DeepSpeed's warning when it is shorter than the warmup.
absl::Status ParseTotalSteps(ObjectReader& params, const std::string& type,
                             engine::LrSchedule* s, ReadLog* log) {
  std::string source;
  ZS_ASSIGN_OR_RETURN(s->total_num_steps,
                      params.IntOrUnset("total_num_steps", 1, &source));
  if (s->total_num_steps < 0) {
    if (!params.Unfilled("total_num_steps")) {
      return params.Error("total_num_steps",
                          absl::StrCat("required by ", type));
    }
    // An "auto" nothing fills (named with the others): read on.
    s->total_num_steps = std::max<int64_t>(1, engine::EffectiveWarmupSteps(*s));
  }
  params.Note("total_num_steps", absl::StrCat(s->total_num_steps), source);
  if (source == "file" && log->steps > 0 && s->total_num_steps != log->steps) {
    log->warnings.push_back(
        absl::StrCat(params.PathOf("total_num_steps"), " (", s->total_num_steps,
                     ") differs from --steps (", log->steps, "): the ", type,
                     " schedule assumes ", s->total_num_steps,
                     " steps; write \"auto\" to follow --steps"));
  }
  if (s->total_num_steps < engine::EffectiveWarmupSteps(*s)) {
    log->warnings.push_back(
        absl::StrCat(params.PathOf("total_num_steps"), " (", s->total_num_steps,
                     ") is less than warmup_num_steps (",
                     engine::EffectiveWarmupSteps(*s), ")"));
  }
  return absl::OkStatus();
}

absl::Status ParseFp16(ObjectReader& fp16, engine::LossScalerOptions* out) {
  ZS_ASSIGN_OR_RETURN(double loss_scale,
                      fp16.Number("loss_scale", 0.0, Bound::kNonNegative));
  ZS_ASSIGN_OR_RETURN(int64_t power,
                      fp16.Int("initial_scale_power", 16, 0, 127));
  out->dynamic = loss_scale == 0;
  out->static_scale = loss_scale;
  out->initial_scale = std::ldexp(1.0, static_cast<int>(power));
  ZS_ASSIGN_OR_RETURN(out->scale_window,
                      fp16.Int("loss_scale_window", 1000, 1));
  ZS_ASSIGN_OR_RETURN(out->hysteresis, fp16.Int("hysteresis", 2, 1));
  ZS_ASSIGN_OR_RETURN(out->consecutive_hysteresis,
                      fp16.Bool("consecutive_hysteresis", false));
  ZS_ASSIGN_OR_RETURN(out->min_scale,
                      fp16.Number("min_loss_scale", 1.0, Bound::kPositive));
  // Python's engine casts floating positional inputs to fp16 with it.
  ZS_ASSIGN_OR_RETURN(bool auto_cast, fp16.Bool("auto_cast", false));
  (void)auto_cast;
  fp16.Ignore("fp16_master_weights_and_grads",
              "master weights are fp32 on the servers");
  return absl::OkStatus();
}

// An "nvme" offload section: the servers' NVMe tier at its nvme_path.
absl::Status UseNvme(ObjectReader& offload, ZeroConfig* out) {
  ZS_ASSIGN_OR_RETURN(std::string path, offload.String("nvme_path", ""));
  if (path.empty()) {
    return offload.Error("nvme_path", "required with \"device\": \"nvme\"");
  }
  NvmeConfig& nvme = out->nvme;
  if (nvme.enabled && nvme.nvme_path != path) {
    return offload.Error(
        "nvme_path",
        absl::StrCat(
            "\"", path, "\" differs from \"", nvme.nvme_path, "\" of ",
            absl::StrReplaceAll(nvme.requested_by, {{".device", ".nvme_path"}}),
            " (the servers have one NVMe path)"));
  }
  if (!nvme.enabled) nvme.requested_by = offload.PathOf("device");
  nvme.enabled = true;
  nvme.nvme_path = path;
  if (out->stage == 0) {
    return offload.Error("device",
                         "\"nvme\" needs zero_optimization.stage 1-3 (stage "
                         "0 has no shard servers)");
  }
  IgnoreAll(offload, kUnusedOffloadNvme);
  return absl::OkStatus();
}

// offload_optimizer: "nvme" is the servers' NVMe tier; "cpu" and "none"
// are what zeroshard always does (the state lives on the servers).
absl::Status ParseOffloadOptimizer(ObjectReader& zero, ZeroConfig* out,
                                   ReadLog* log) {
  ZS_ASSIGN_OR_RETURN(ObjectReader offload, zero.Object("offload_optimizer"));
  if (!offload.present()) return absl::OkStatus();
  const google::protobuf::Value* device = offload.Raw("device");
  if (device == nullptr ||
      device->kind_case() != google::protobuf::Value::kStringValue ||
      device->string_value() != "nvme") {
    if (device != nullptr &&
        device->kind_case() == google::protobuf::Value::kStringValue &&
        device->string_value() != "cpu" && device->string_value() != "none") {
      return offload.Error(
          "device", absl::StrCat("must be \"none\", \"cpu\" or \"nvme\", "
                                 "got \"",
                                 device->string_value(), "\""));
    }
    log->warnings.push_back(
        absl::StrCat(zero.PathOf("offload_optimizer"),
                     ": not used by zeroshard (optimizer state always lives "
                     "on the shard servers); ignored"));
    return absl::OkStatus();
  }
  offload.Note("device", "\"nvme\"", "file");
  ZS_RETURN_IF_ERROR(UseNvme(offload, out));
  offload.WarnUnknown();
  return absl::OkStatus();
}

absl::Status ParseOffloadParam(ObjectReader& zero, ZeroConfig* out,
                               ReadLog* log) {
  ZS_ASSIGN_OR_RETURN(ObjectReader offload, zero.Object("offload_param"));
  ZS_ASSIGN_OR_RETURN(std::string device, offload.String("device", "none"));
  const bool nvme = device == "nvme";
  if (nvme) device = "server";
  if (device == "cpu") {
    log->warnings.push_back(absl::StrCat(offload.PathOf("device"),
                                         ": \"cpu\" is read as \"server\""));
    device = "server";
  }
  if (device == "server") {
    out->offload_param = OffloadDevice::kServer;
  } else if (device != "none") {
    return offload.Error("device", absl::StrCat("must be \"none\", "
                                                "\"server\", \"cpu\" or "
                                                "\"nvme\", got \"",
                                                device, "\""));
  }
  if (out->offload_param == OffloadDevice::kServer && out->stage != 3) {
    // As DeepSpeed: parameters are partitioned, so offloaded, at stage 3
    // only; below it the section is read for errors and not used.
    log->warnings.push_back(absl::StrCat(zero.PathOf("offload_param"),
                                         ": used only at stage 3, got stage ",
                                         out->stage, "; ignored"));
    out->offload_param = OffloadDevice::kNone;
    return absl::OkStatus();
  }
  if (nvme) {
    ZS_RETURN_IF_ERROR(UseNvme(offload, out));  // warns its unused keys
  } else {
    offload.Ignore("nvme_path", "used only with \"device\": \"nvme\"");
    IgnoreAll(offload, kUnusedOffloadParam);
  }
  offload.WarnUnknown();
  return absl::OkStatus();
}

// "host:port" with a non-empty host (IPv6 in brackets) and port 1..65535,
// no gRPC scheme.
bool IsHostPort(absl::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) return false;
  const absl::string_view host = address.substr(0, colon);
  if (!host.empty() && host.front() != '[' &&
      host.find(':') != absl::string_view::npos) {
    return false;  // a scheme, or an IPv6 host without brackets
  }
  const absl::StatusOr<int> port = AddressPort(address);
  return port.ok() && *port > 0;
}

absl::Status ParseServers(ObjectReader& zs, ZeroShardConfig* out) {
  const google::protobuf::Value* v = zs.Raw("servers");
  if (v == nullptr || !zs.Has("servers") ||
      v->kind_case() == google::protobuf::Value::kNumberValue) {
    // A count; absent, null and "auto" (logged by Int) leave it at 0.
    ZS_ASSIGN_OR_RETURN(int64_t count, zs.Int("servers", 0, 1, 1 << 20));
    out->num_servers = static_cast<int>(count);
    return absl::OkStatus();
  }
  const std::string what =
      "must be a positive count or a non-empty array of \"host:port\" "
      "strings, got ";
  if (v->kind_case() != google::protobuf::Value::kListValue ||
      v->list_value().values_size() == 0) {
    return zs.Error("servers", what + internal::DescribeValue(*v));
  }
  std::set<std::string> seen;
  for (int i = 0; i < v->list_value().values_size(); ++i) {
    const google::protobuf::Value& item = v->list_value().values(i);
    const std::string key = absl::StrCat("servers[", i, "]");
    if (item.kind_case() != google::protobuf::Value::kStringValue ||
        !IsHostPort(item.string_value())) {
      return zs.Error(key, "must be a \"host:port\" string, got " +
                               internal::DescribeValue(item));
    }
    if (!seen.insert(item.string_value()).second) {
      return zs.Error(
          key, absl::StrCat("duplicate address \"", item.string_value(), "\""));
    }
    out->server_addresses.push_back(item.string_value());
  }
  out->num_servers = static_cast<int>(out->server_addresses.size());
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseOptimizer(ObjectReader& root, AdamWConfig* out) {
  ZS_ASSIGN_OR_RETURN(ObjectReader opt, root.Object("optimizer"));
  ZS_ASSIGN_OR_RETURN(out->type, opt.String("type", "AdamW"));
  const std::string type = absl::AsciiStrToLower(out->type);
  if (type == "onebitadam" || type == "zerooneadam") {
    // Adam with compressed communication: the same optimizer, which the
    // servers run exactly.
    return opt.Error(
        "type", absl::StrCat("\"", out->type,
                             "\" is Adam with compressed gradient exchange; "
                             "the shard servers run exact AdamW: write "
                             "\"Adam\" (its compression keys, such as "
                             "freeze_step, do not apply)"));
  }
  if (type != "adam" && type != "adamw") {
    return opt.Error("type", absl::StrCat("must be Adam or AdamW (the shard "
                                          "servers run AdamW), got \"",
                                          out->type, "\""));
  }
  ZS_ASSIGN_OR_RETURN(ObjectReader params, opt.Object("params"));
  ZS_ASSIGN_OR_RETURN(out->lr, params.Number("lr", 1e-3, Bound::kNonNegative));
  ZS_ASSIGN_OR_RETURN(std::vector<double> betas,
                      params.NumberArray("betas", {0.9, 0.999}));
  for (double beta : betas) {
    if (!(beta >= 0 && beta < 1)) {
      return params.Error("betas",
                          absl::StrCat("must be two numbers in [0, 1), got [",
                                       betas[0], ", ", betas[1], "]"));
    }
  }
  out->beta1 = betas[0];
  out->beta2 = betas[1];
  ZS_ASSIGN_OR_RETURN(out->eps, params.Number("eps", 1e-8, Bound::kPositive));
  ZS_ASSIGN_OR_RETURN(bool adam_w_mode, params.Bool("adam_w_mode", true));
  ZS_ASSIGN_OR_RETURN(bool torch_adam, params.Bool("torch_adam", false));
  // With torch_adam DeepSpeed builds torch.optim.AdamW (engine.py,
  // _configure_basic_optimizer), whose weight_decay defaults to 0.01; its
  // own FusedAdam and CPUAdam default to 0.
  const bool adamw = type == "adamw" || adam_w_mode;
  ZS_ASSIGN_OR_RETURN(
      out->weight_decay,
      params.Number("weight_decay", torch_adam && adamw ? 0.01 : 0.0,
                    Bound::kNonNegative));
  if (type == "adam" && !adam_w_mode && out->weight_decay != 0) {
    return params.Error(
        "adam_w_mode",
        "false (Adam with L2 weight decay) is not supported: the shard "
        "servers run AdamW (decoupled weight decay)");
  }
  ZS_ASSIGN_OR_RETURN(out->bias_correction,
                      params.Bool("bias_correction", true));
  ZS_ASSIGN_OR_RETURN(bool amsgrad, params.Bool("amsgrad", false));
  if (amsgrad) return params.Error("amsgrad", "only false is supported");
  if (params.Raw("max_grad_norm") != nullptr) {
    return params.Error("max_grad_norm",
                        "not an optimizer parameter (DeepSpeed refuses it "
                        "too): give the top-level gradient_clipping");
  }
  params.WarnUnknown();
  opt.Ignore("legacy_fusion", "a DeepSpeed implementation detail");
  opt.WarnUnknown();
  return absl::OkStatus();
}

absl::Status ParseScheduler(ObjectReader& root, double optimizer_lr,
                            engine::LrSchedule* s, ReadLog* log) {
  s->lr = optimizer_lr;
  ZS_ASSIGN_OR_RETURN(ObjectReader sched, root.Object("scheduler"));
  if (!sched.present()) return absl::OkStatus();  // constant lr
  ZS_ASSIGN_OR_RETURN(std::string type, sched.String("type", ""));
  ZS_ASSIGN_OR_RETURN(ObjectReader params, sched.Object("params"));
  if (type == "WarmupLR" || type == "WarmupDecayLR") {
    s->type = type == "WarmupLR" ? engine::LrScheduleType::kWarmupLR
                                 : engine::LrScheduleType::kWarmupDecayLR;
    ZS_ASSIGN_OR_RETURN(s->warmup_min_lr, params.Number("warmup_min_lr", 0.0,
                                                        Bound::kNonNegative));
    ZS_ASSIGN_OR_RETURN(s->warmup_max_lr, params.Number("warmup_max_lr", 1e-3,
                                                        Bound::kNonNegative));
  } else if (type == "WarmupCosineLR") {
    s->type = engine::LrScheduleType::kWarmupCosineLR;
    ZS_ASSIGN_OR_RETURN(
        s->warmup_min_ratio,
        params.Number("warmup_min_ratio", 0.0, Bound::kNonNegative));
    ZS_ASSIGN_OR_RETURN(s->cos_min_ratio, params.Number("cos_min_ratio", 1e-4,
                                                        Bound::kNonNegative));
  } else if (type.empty()) {
    return sched.Error("type",
                       "required: WarmupLR, WarmupDecayLR or "
                       "WarmupCosineLR");
  } else {
    return sched.Error("type", absl::StrCat("must be WarmupLR, WarmupDecayLR "
                                            "or WarmupCosineLR, got \"",
                                            type, "\""));
  }
  ZS_ASSIGN_OR_RETURN(s->warmup_num_steps,
                      params.Int("warmup_num_steps", 1000, 0));
  ZS_ASSIGN_OR_RETURN(s->warmup_type, ParseWarmupType(params));
  if (s->type != engine::LrScheduleType::kWarmupLR) {
    ZS_RETURN_IF_ERROR(ParseTotalSteps(params, type, s, log));
  }
  if (s->type == engine::LrScheduleType::kWarmupCosineLR &&
      s->total_num_steps == engine::EffectiveWarmupSteps(*s)) {
    return params.Error("total_num_steps",
                        absl::StrCat("must differ from the warmup length ",
                                     engine::EffectiveWarmupSteps(*s),
                                     " (WarmupCosineLR divides by their "
                                     "difference)"));
  }
  ZS_ASSIGN_OR_RETURN(int64_t last, params.Int("last_batch_iteration", -1, -1));
  if (last != -1) {
    return params.Error("last_batch_iteration",
                        "only -1 is supported: the engine's step counter "
                        "resumes the schedule");
  }
  params.WarnUnknown();
  sched.WarnUnknown();
  return absl::OkStatus();
}

absl::Status ParsePrecision(ObjectReader& root, EngineConfig* out) {
  ZS_ASSIGN_OR_RETURN(ObjectReader fp16, root.Object("fp16"));
  ZS_ASSIGN_OR_RETURN(bool fp16_enabled, fp16.Bool("enabled", false));
  engine::LossScalerOptions fp16_scaler;
  ZS_RETURN_IF_ERROR(ParseFp16(fp16, &fp16_scaler));
  fp16.WarnUnknown();
  // "bfloat16" is DeepSpeed's old name for the section.
  const char* bf16_key =
      root.Has("bf16") || !root.Has("bfloat16") ? "bf16" : "bfloat16";
  ZS_ASSIGN_OR_RETURN(ObjectReader bf16, root.Object(bf16_key));
  ZS_ASSIGN_OR_RETURN(bool bf16_enabled, bf16.Bool("enabled", false));
  bf16.Ignore("immediate_grad_update", "a DeepSpeed implementation detail");
  bf16.Ignore("check_grad_overflow",
              "an update whose gradients are not finite is skipped, always");
  bf16.Ignore("bf16_master_weights_and_grads",
              "master weights are fp32 on the servers");
  bf16.Ignore("bf16_optimizer_states",
              "the optimizer state is fp32 on the servers");
  bf16.WarnUnknown();
  if (root.Has("bf16") && root.Has("bfloat16")) {
    root.Ignore("bfloat16",
                "DeepSpeed's old name of the bf16 section, which "
                "the config also has and which decides");
  }
  if (fp16_enabled && bf16_enabled) {
    return bf16.Error("enabled", "fp16 and bf16 cannot both be enabled");
  }
  out->precision = fp16_enabled   ? engine::Precision::kFp16
                   : bf16_enabled ? engine::Precision::kBf16
                                  : engine::Precision::kFp32;
  if (fp16_enabled) out->loss_scaler = fp16_scaler;
  return absl::OkStatus();
}

absl::Status ParseTorchAutocast(ObjectReader& root, EngineConfig* out) {
  ZS_ASSIGN_OR_RETURN(ObjectReader ta, root.Object("torch_autocast"));
  ZS_ASSIGN_OR_RETURN(bool enabled, ta.Bool("enabled", false));
  ZS_ASSIGN_OR_RETURN(std::string dtype, ta.String("dtype", "bfloat16"));
  const std::string d = absl::AsciiStrToLower(dtype);
  if (d == "float16" || d == "fp16" || d == "half" || d == "torch.float16" ||
      d == "torch.half") {
    return ta.Error("dtype",
                    absl::StrCat("\"", dtype,
                                 "\" needs torch's GradScaler, which zeroshard "
                                 "does not run: use \"bfloat16\", or the fp16 "
                                 "section (its loss scaler)"));
  }
  if (d != "bfloat16" && d != "bf16" && d != "torch.bfloat16") {
    return ta.Error("dtype",
                    absl::StrCat("must be \"bfloat16\", got \"", dtype, "\""));
  }
  ta.Ignore("lower_precision_safe_modules",
            "gradients travel in the parameters' fp32");
  ta.WarnUnknown();
  if (enabled && out->precision != engine::Precision::kFp32) {
    return ta.Error(
        "enabled",
        "true with the fp16 or bf16 section enabled: choose one (torch_"
        "autocast keeps fp32 parameters and runs the forward under "
        "torch.autocast; fp16 and bf16 cast the module)");
  }
  out->torch_autocast = enabled;
  return absl::OkStatus();
}

absl::Status ParseZero(ObjectReader& root, ZeroConfig* out, ReadLog* log) {
  ZS_ASSIGN_OR_RETURN(ObjectReader zero, root.Object("zero_optimization"));
  ZS_ASSIGN_OR_RETURN(int64_t stage, zero.Int("stage", 0, 0, 3));
  out->stage = static_cast<int>(stage);
  ZS_ASSIGN_OR_RETURN(out->overlap_comm,
                      zero.Bool("overlap_comm", out->stage == 3));
  ZS_ASSIGN_OR_RETURN(out->contiguous_gradients,
                      zero.Bool("contiguous_gradients", true));
  ZS_ASSIGN_OR_RETURN(out->reduce_scatter, zero.Bool("reduce_scatter", true));
  struct SizeKey {
    const char* key;
    int64_t* field;
  };
  const SizeKey sizes[] = {
      {"reduce_bucket_size", &out->reduce_bucket_size},
      {"allgather_bucket_size", &out->allgather_bucket_size},
      {"stage3_prefetch_bucket_size", &out->stage3_prefetch_bucket_size},
      {"stage3_max_live_parameters", &out->stage3_max_live_parameters},
      {"stage3_max_reuse_distance", &out->stage3_max_reuse_distance},
      {"stage3_param_persistence_threshold",
       &out->stage3_param_persistence_threshold},
      {"sub_group_size", &out->sub_group_size},
  };
  for (const SizeKey& s : sizes) {
    ZS_ASSIGN_OR_RETURN(*s.field, zero.Int(s.key, *s.field, 0));
  }
  ZS_RETURN_IF_ERROR(ParseOffloadOptimizer(zero, out, log));
  ZS_RETURN_IF_ERROR(ParseOffloadParam(zero, out, log));
  IgnoreAll(zero, kUnusedZero);
  // Read and checked (the C API reports them), but nothing acts on them.
  IgnoreAll(zero, kReadButUnusedZero);
  zero.WarnUnknown();
  return absl::OkStatus();
}

absl::Status ParseAio(ObjectReader& root, NvmeConfig* nvme, ReadLog* log) {
  ZS_ASSIGN_OR_RETURN(ObjectReader aio, root.Object("aio"));
  if (!aio.present()) return absl::OkStatus();
  if (!nvme->enabled) {
    log->warnings.push_back(
        "aio: used only with an offload to \"nvme\"; ignored");
    return absl::OkStatus();
  }
  struct Key {
    const char* key;
    int64_t* field;
  };
  int64_t threads = -1, intra = -1;
  for (const Key& k :
       {Key{"block_size", &nvme->block_size},
        Key{"queue_depth", &nvme->queue_depth}, Key{"thread_count", &threads},
        Key{"intra_op_parallelism", &intra}}) {
    std::string source;
    ZS_ASSIGN_OR_RETURN(*k.field, aio.IntOrUnset(k.key, 1, &source));
    if (*k.field >= 0) aio.Note(k.key, absl::StrCat(*k.field), source);
  }
  if (threads >= 0 && intra >= 0 && threads != intra) {
    return aio.Error("intra_op_parallelism",
                     absl::StrCat(intra, " differs from aio.thread_count ",
                                  threads, " (both are the I/O threads)"));
  }
  nvme->intra_op_parallelism = intra >= 0 ? intra : threads;
  aio.Ignore("single_submit", "the servers submit I/O in batches");
  aio.Ignore("overlap_events", "the servers overlap I/O always");
  aio.Ignore("use_gds", "no GPUDirect Storage");
  aio.WarnUnknown();
  return absl::OkStatus();
}

absl::Status ParseZeroShard(ObjectReader& root, ZeroShardConfig* out) {
  ZS_ASSIGN_OR_RETURN(ObjectReader zs, root.Object("zeroshard"));
  ZS_RETURN_IF_ERROR(ParseServers(zs, out));
  ZS_ASSIGN_OR_RETURN(out->server_aggregation,
                      zs.Bool("server_aggregation", false));
  ZS_ASSIGN_OR_RETURN(int64_t alignment,
                      zs.Int("alignment", 64, 1, uint32_t{0xFFFFFFFF}));
  out->alignment = static_cast<uint32_t>(alignment);
  ZS_ASSIGN_OR_RETURN(int64_t interval,
                      zs.Int("checkpoint_interval", 0, 0, int64_t{1} << 31));
  out->checkpoint_interval = static_cast<int>(interval);
  ZS_ASSIGN_OR_RETURN(out->delayed_parameter_update,
                      zs.Bool("delayed_parameter_update", false));
  ZS_ASSIGN_OR_RETURN(
      out->delayed_update_warmup_steps,
      zs.Int("delayed_update_warmup_steps", 40, 1, int64_t{1} << 40));
  ZS_ASSIGN_OR_RETURN(out->device, zs.String("device", "cpu"));
  if (out->device != "cpu" && out->device != "cuda" &&
      out->device != "host-emulated") {
    return zs.Error("device", absl::StrCat("must be \"cpu\", \"cuda\" or "
                                           "\"host-emulated\", got \"",
                                           out->device, "\""));
  }
  zs.WarnUnknown();
  return absl::OkStatus();
}

absl::Status ReadUnusedTopLevel(ObjectReader& root) {
  IgnoreAll(root, kUnusedTopLevel);
  // Read by Python's deepspeed_io (python/zeroshard/engine.py).
  ZS_ASSIGN_OR_RETURN(bool drop_last, root.Bool("dataloader_drop_last", false));
  (void)drop_last;
  ZS_ASSIGN_OR_RETURN(std::string op,
                      root.String("gradient_allreduce_op", "mean"));
  if (absl::AsciiStrToLower(op) != "mean") {
    return root.Error(
        "gradient_allreduce_op",
        absl::StrCat("only \"mean\" (DeepSpeed's default): the workers "
                     "average the gradients, got \"",
                     op, "\""));
  }
  return absl::OkStatus();
}

}  // namespace zeroshard::config::internal
