// Where each value of a resolved DeepSpeed config came from, and the table
// that shows it (zeroshard train prints the "auto" rows, `zeroshard config
// check` every row; report.md can include the same text).
//
//   key                                  value       from
//   optimizer.params.lr                  0.0003      auto <- --learning_rate
//   zero_optimization.reduce_bucket_size 16384       auto <- model (hidden size
//   128)
//
// Sources: "file" (written in the config), "default" (absent: DeepSpeed's
// default), "auto <- <what>" (written as "auto", filled from a flag, the
// model or a rule), "derived (<rule>)" (the batch sizes DeepSpeed derives).
// Plain values; thread-safe.
#ifndef ZEROSHARD_WORKER_CONFIG_RESOLVED_TABLE_H_
#define ZEROSHARD_WORKER_CONFIG_RESOLVED_TABLE_H_

#include <string>
#include <vector>

namespace zeroshard::config {

struct ResolvedKey {
  std::string key;     // full path: "scheduler.params.total_num_steps"
  std::string value;   // as JSON would write it: 1000, 0.0003, true, "log"
  std::string source;  // see above
};

// True for a row whose value was written as "auto" in the config.
bool IsAutoRow(const ResolvedKey& row);

// The rows as an aligned three-column table with a header line, one row
// per line, each line ending in '\n'; only the "auto" rows when
// `autos_only` ("" when there are none).
std::string RenderResolvedTable(const std::vector<ResolvedKey>& rows,
                                bool autos_only);

}  // namespace zeroshard::config

#endif  // ZEROSHARD_WORKER_CONFIG_RESOLVED_TABLE_H_
