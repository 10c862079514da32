#include "worker/train/metrics_log.h"

#include "common/status_macros.h"

namespace zeroshard::train {

absl::StatusOr<MetricsLog> MetricsLog::Create(Env* env,
                                              const std::string& path) {
  // OpenOptions never truncate: remove the old file first.
  absl::Status removed = env->RemoveFile(path);
  if (!removed.ok() && !absl::IsNotFound(removed)) return removed;
  OpenOptions o;
  o.create = true;
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<File> file, env->OpenFile(path, o));
  return MetricsLog(std::move(file));
}

absl::Status MetricsLog::Append(const std::string& record) {
  const std::string line = record + "\n";
  ZS_RETURN_IF_ERROR(file_->Write(size_, line.data(), line.size()));
  size_ += line.size();
  return absl::OkStatus();
}

}  // namespace zeroshard::train
