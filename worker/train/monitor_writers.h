// The files of DeepSpeed's file monitors, written by rank 0's worker
// (config: worker/config/monitor_config.h):
//
// - tensorboard: a TensorBoard event file output_path/job_name/
//   events.out.tfevents.<seconds>.<host>.<pid> in TensorFlow's record format
//   (TFRecord: uint64 length, masked CRC-32C of the length, an Event proto,
//   masked CRC-32C of the data); the first Event holds file_version
//   "brain.Event:2", each later one a wall_time, a step and one
//   Summary.Value {tag, simple_value}. No TensorFlow: the few proto fields
//   are encoded here.
// - csv_monitor: DeepSpeed's layout: one file per tag,
//   output_path/job_name/<tag with '/' and ' ' as '_'>.csv, first line
//   "step,<last component of the tag>", then "step,value" lines.
//
// The tags and steps are DeepSpeed's engine's: Train/Samples/train_loss,
// Train/Samples/lr and, with fp16, Train/Samples/loss_scale, at step = the
// global samples trained so far (optimizer steps x train_batch_size).
//
//   ZS_ASSIGN_OR_RETURN(auto monitors, FileMonitors::Open(config.monitor,
//                                                          fp16, batch));
//   monitors->OnStep(stats);   // after every optimizer step
//
// Files go through the Env (common/env/files.h: AppendableFile); every write
// reaches the OS at once (visible to a reader while training runs).
// Threading: one thread at a time. Errors: the Env's, naming the path.
#ifndef ZEROSHARD_WORKER_TRAIN_MONITOR_WRITERS_H_
#define ZEROSHARD_WORKER_TRAIN_MONITOR_WRITERS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/env/env.h"
#include "common/env/files.h"
#include "worker/config/monitor_config.h"
#include "worker/engine/step_stats.h"

namespace zeroshard::train {

struct MonitorEvent {
  std::string tag;  // "Train/Samples/train_loss"
  double value = 0;
  int64_t step = 0;  // global samples
};

// The events DeepSpeed's engine logs for one optimizer step.
std::vector<MonitorEvent> StepEvents(const engine::StepStats& s, bool fp16,
                                     int64_t train_batch_size);

// TFRecord framing of `data`, and TensorFlow's CRC mask
// ((crc >> 15 | crc << 17) + 0xa282ead8) over CRC-32C.
std::string TfRecord(absl::string_view data);
uint32_t MaskedCrc32c(absl::string_view data);
// A serialized Event: {wall_time, file_version} or {wall_time, step,
// summary {value {tag, simple_value}}}.
std::string FileVersionEvent(double wall_time);
std::string ScalarEvent(double wall_time, int64_t step, absl::string_view tag,
                        float value);

// Creates `dir` and any missing parents through `env`.
absl::Status CreateDirs(Env* env, const std::string& dir);

class TensorBoardWriter {
 public:
  // Creates `dir` (and its parents) and a new event file in it. `env` must
  // outlive the writer.
  static absl::StatusOr<std::unique_ptr<TensorBoardWriter>> Open(
      const std::string& dir, Env* env = DefaultEnv());
  absl::Status Write(const std::vector<MonitorEvent>& events, double wall_time);
  const std::string& path() const { return file_.path(); }

 private:
  explicit TensorBoardWriter(AppendableFile f) : file_(std::move(f)) {}
  AppendableFile file_;
};

class CsvMonitorWriter {
 public:
  // Creates `dir` (and its parents). Like DeepSpeed, appends to files
  // already there, starting each with a header line in this run. `env`
  // must outlive the writer.
  static absl::StatusOr<std::unique_ptr<CsvMonitorWriter>> Open(
      const std::string& dir, Env* env = DefaultEnv());
  absl::Status Write(const std::vector<MonitorEvent>& events);

 private:
  CsvMonitorWriter(std::string dir, Env* env)
      : dir_(std::move(dir)), env_(env) {}
  std::string dir_;
  Env* env_;
  std::map<std::string, AppendableFile> files_;  // by file name
};

// The enabled monitors of one run.
class FileMonitors {
 public:
  static absl::StatusOr<std::unique_ptr<FileMonitors>> Open(
      const config::MonitorConfig& config, bool fp16, int64_t train_batch_size,
      Env* env = DefaultEnv());
  // Writes the step's events to every monitor. A monitor whose write
  // fails is closed and the others go on; the error names each that failed
  // ("tensorboard: <Env error naming the file>; closed").
  absl::Status OnStep(const engine::StepStats& s);
  // "tensorboard: DIR, csv_monitor: DIR" for the log.
  std::string Describe() const;

 private:
  FileMonitors() = default;
  bool fp16_ = false;
  int64_t batch_ = 1;
  std::string tb_dir_, csv_dir_;
  std::unique_ptr<TensorBoardWriter> tb_;
  std::unique_ptr<CsvMonitorWriter> csv_;
};

}  // namespace zeroshard::train

#endif  // ZEROSHARD_WORKER_TRAIN_MONITOR_WRITERS_H_
