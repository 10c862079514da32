// Reading workers' log files while they grow: the last lines of a log for
// an error message, and new complete lines as they are appended (for the
// launcher's rank-prefixed output and its progress). Files are read through
// a Env (DefaultEnv() unless a test passes one; it must outlive
// the follower).
//
// Threading: a LogFollower is used by one thread at a time.
#ifndef ZEROSHARD_LAUNCHER_LOG_TAIL_H_
#define ZEROSHARD_LAUNCHER_LOG_TAIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/env/env.h"

namespace zeroshard {

// The last `lines` lines of the file at `path` (within its last MiB), each
// indented by four spaces and ending in '\n'; "" when it cannot be read.
std::string TailLines(const std::string& path, int lines,
                      Env* env = DefaultEnv());

// Follows one file: each ReadNewLines() returns the complete lines appended
// since the last call (without '\n'); a partial last line waits for its
// newline. A file that does not exist yet reads as empty.
class LogFollower {
 public:
  explicit LogFollower(std::string path, Env* env = DefaultEnv())
      : path_(std::move(path)), env_(env) {}
  // With `to_end` (the writer has exited) a last line without its newline
  // is returned too.
  std::vector<std::string> ReadNewLines(bool to_end = false);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  Env* env_;
  int64_t offset_ = 0;  // bytes consumed (up to the last newline)
};

// After a restart of every rank: rank r's log (logs[r]) becomes
// <work_dir>/rank-<r>.attempt-<attempt>.log, beside the next attempt's.
// A log that cannot be renamed is left (the next attempt replaces it).
void KeepAttemptLogs(const std::vector<LogFollower>& logs,
                     const std::string& work_dir, int attempt,
                     Env* env = DefaultEnv());

}  // namespace zeroshard

#endif  // ZEROSHARD_LAUNCHER_LOG_TAIL_H_
