// DeepSpeed's monitor sections of a ds_config (DeepSpeed's
// deepspeed/monitor/config.py), with DeepSpeed's keys and defaults:
//
//   "tensorboard": {"enabled": true, "output_path": "runs/", "job_name": "j"}
//   "csv_monitor": {"enabled": true, "output_path": "csv/", "job_name": "j"}
//   "wandb":       {"enabled": true, "team": ..., "group": ..., "project": ...}
//   "comet":       {"enabled": true, "project": ..., "workspace": ..., ...}
//
// tensorboard and csv_monitor: rank 0 writes TensorBoard event files or
// DeepSpeed's CSV files (worker/train/monitor_writers.h) into the folder
// output_path/job_name (output_path defaults to "", i.e. job_name relative to
// the worker's working directory; job_name to "DeepSpeedJobName").
// wandb and comet need their online services: when enabled, one warning
// "<section>: not available offline ..." and nothing is logged there; their
// other keys are accepted as DeepSpeed's and not used.
//
// Internal to ds_config (ParseDeepSpeedConfig fills EngineConfig::monitor).
// Pure; errors are INVALID_ARGUMENT naming the key's full path
// ("tensorboard.enabled: must be a boolean, got 1").
#ifndef ZEROSHARD_WORKER_CONFIG_MONITOR_CONFIG_H_
#define ZEROSHARD_WORKER_CONFIG_MONITOR_CONFIG_H_

#include <string>

#include "absl/status/status.h"

namespace zeroshard::config {

// One file-writing monitor (tensorboard or csv_monitor).
struct MonitorOutput {
  bool enabled = false;
  std::string output_path;  // DeepSpeed's default: ""
  std::string job_name = "DeepSpeedJobName";
  // output_path/job_name, as Python's os.path.join joins them.
  std::string Dir() const;
};

struct MonitorConfig {
  MonitorOutput tensorboard;
  MonitorOutput csv_monitor;
  bool wandb = false;  // enabled in the config (not available here)
  bool comet = false;
  bool any_file_monitor() const {
    return tensorboard.enabled || csv_monitor.enabled;
  }
};

namespace internal {
class ObjectReader;
struct ReadLog;
// Reads "tensorboard", "csv_monitor", "wandb" and "comet" from `root`.
absl::Status ParseMonitors(ObjectReader& root, MonitorConfig* out,
                           ReadLog* log);
}  // namespace internal

}  // namespace zeroshard::config

#endif  // ZEROSHARD_WORKER_CONFIG_MONITOR_CONFIG_H_
