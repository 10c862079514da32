// Starting and stopping child processes (servers, workers) from the
// launcher and from tests.
//
// A child started here gets SIGTERM if its parent dies (PR_SET_PDEATHSIG),
// so a killed launcher or test never leaves orphans. Output goes to the
// parent's stdout/stderr unless `log_path` names a file.
//
// Threading: a Subprocess is used by one thread at a time.
#ifndef ZEROSHARD_COMMON_SUBPROCESS_H_
#define ZEROSHARD_COMMON_SUBPROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace zeroshard {

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0] is the executable path
  std::vector<std::string> env;   // extra NAME=VALUE entries
  std::string log_path;           // empty: inherit stdout/stderr
};

class Subprocess {
 public:
  static absl::StatusOr<Subprocess> Spawn(const SpawnOptions& options);

  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&& other) noexcept;
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;
  // Kills (SIGKILL) and reaps a child that is still running.
  ~Subprocess();

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0 && !status_.has_value(); }
  // Whether the running child is stopped (SIGSTOP, Ctrl-Z, a debugger):
  // state T or t in /proc/<pid>/stat. False when it cannot be read.
  bool stopped() const;

  // Sends a signal (no-op once the child has been reaped).
  void Signal(int signo);
  // Reaps the child if it has exited; returns its wait status.
  std::optional<int> Poll();
  // Waits up to `timeout` for exit; returns the wait status or
  // DEADLINE_EXCEEDED.
  absl::StatusOr<int> Wait(std::chrono::milliseconds timeout);
  // SIGTERM, wait up to `grace`, then SIGKILL; returns the wait status.
  int Stop(std::chrono::milliseconds grace);

 private:
  explicit Subprocess(pid_t pid) : pid_(pid) {}
  pid_t pid_ = -1;
  std::optional<int> status_;
};

// "exit code N" or "signal S (NAME)": what ended a process ("failed with ...").
std::string DescribeWaitStatus(int status);

// The state letter of a /proc/<pid>/stat line ("R", "S", "T", ...: the
// field after the command's closing parenthesis, which may itself hold
// spaces and parentheses); '?' when the line has none (pure).
char StateFromProcStat(const std::string& stat);

// Directory containing the running executable.
std::string SelfDirectory();

// Finds a sibling binary of the running executable: `dir/name` for each of
// SelfDirectory() + relative `candidates` (e.g. "../server"), else NOT_FOUND
// listing where it looked.
absl::StatusOr<std::string> FindBinary(const std::string& name,
                                       const std::vector<std::string>& dirs);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_SUBPROCESS_H_
