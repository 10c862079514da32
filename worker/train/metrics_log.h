// The --metrics_file of one worker: JSON-lines records (run_metrics.h)
// appended through the Env (common/env/env.h), each visible to a reader
// (the launcher follows rank 0's) as soon as Append returns.
//
//   ZS_ASSIGN_OR_RETURN(MetricsLog log, MetricsLog::Create(DefaultEnv(), p));
//   ZS_RETURN_IF_ERROR(log.Append(StartRecord(info)));
//
// Threading: one thread at a time. Errors: the Env's, naming the path.
#ifndef ZEROSHARD_WORKER_TRAIN_METRICS_LOG_H_
#define ZEROSHARD_WORKER_TRAIN_METRICS_LOG_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/env/env.h"

namespace zeroshard::train {

class MetricsLog {
 public:
  // Creates `path`, replacing any file there. `env` must outlive the log.
  static absl::StatusOr<MetricsLog> Create(Env* env, const std::string& path);

  // Appends `record` and a newline.
  absl::Status Append(const std::string& record);
  // Makes what was appended durable (at the end of a run).
  absl::Status Sync() { return file_->Sync(); }

 private:
  explicit MetricsLog(std::unique_ptr<File> file) : file_(std::move(file)) {}

  std::unique_ptr<File> file_;
  uint64_t size_ = 0;
};

}  // namespace zeroshard::train

#endif  // ZEROSHARD_WORKER_TRAIN_METRICS_LOG_H_
