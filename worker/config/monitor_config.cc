#include "worker/config/monitor_config.h"

#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/config/json_reader.h"

namespace zeroshard::config {

std::string MonitorOutput::Dir() const {
  if (output_path.empty()) return job_name;
  if (output_path.back() == '/') return output_path + job_name;
  return absl::StrCat(output_path, "/", job_name);
}

namespace internal {
namespace {

absl::Status ParseOutput(ObjectReader& root, const char* section,
                         MonitorOutput* out) {
  ZS_ASSIGN_OR_RETURN(ObjectReader s, root.Object(section));
  ZS_ASSIGN_OR_RETURN(out->enabled, s.Bool("enabled", false));
  ZS_ASSIGN_OR_RETURN(out->output_path, s.String("output_path", ""));
  ZS_ASSIGN_OR_RETURN(out->job_name, s.String("job_name", "DeepSpeedJobName"));
  if (out->enabled && out->Dir().empty()) {
    return s.Error("job_name", "must not be empty when output_path is empty");
  }
  s.WarnUnknown();
  return absl::OkStatus();
}

// A section for an online service: its keys are DeepSpeed's and unused.
absl::Status ParseOnline(ObjectReader& root, const char* section,
                         std::initializer_list<const char*> keys,
                         const char* what, bool* enabled, ReadLog* log) {
  ZS_ASSIGN_OR_RETURN(ObjectReader s, root.Object(section));
  ZS_ASSIGN_OR_RETURN(*enabled, s.Bool("enabled", false));
  for (const char* key : keys) s.Raw(key);
  s.WarnUnknown();
  if (*enabled) {
    log->warnings.push_back(absl::StrCat(
        section, ": not available offline (", what,
        "); nothing is logged there: use tensorboard or csv_monitor"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseMonitors(ObjectReader& root, MonitorConfig* out,
                           ReadLog* log) {
  ZS_RETURN_IF_ERROR(ParseOutput(root, "tensorboard", &out->tensorboard));
  ZS_RETURN_IF_ERROR(ParseOutput(root, "csv_monitor", &out->csv_monitor));
  ZS_RETURN_IF_ERROR(ParseOnline(root, "wandb", {"team", "group", "project"},
                                 "Weights & Biases is an online service",
                                 &out->wandb, log));
  ZS_RETURN_IF_ERROR(
      ParseOnline(root, "comet",
                  {"samples_log_interval", "project", "workspace", "api_key",
                   "experiment_name", "experiment_key", "online", "mode"},
                  "Comet is an online service", &out->comet, log));
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace zeroshard::config
