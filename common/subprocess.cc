#include "common/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/env/env.h"

extern char** environ;

namespace zeroshard {

absl::StatusOr<Subprocess> Subprocess::Spawn(const SpawnOptions& options) {
  if (options.argv.empty()) {
    return absl::InvalidArgumentError("no program to run");
  }
  if (access(options.argv[0].c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat("cannot execute ", options.argv[0],
                                            ": ", std::strerror(errno)));
  }
  int log_fd = -1;
  if (!options.log_path.empty()) {
    // Not through Env on purpose: the child needs a raw descriptor
    // to dup2 onto its stdout and stderr before exec, which an Env's File
    // does not hand out. (Allowed by tools/direct_io_check.sh.)
    log_fd = open(options.log_path.c_str(),
                  O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0) {
      return absl::InternalError(absl::StrCat(
          "cannot open log ", options.log_path, ": ", std::strerror(errno)));
    }
  }
  // Build everything the child needs before fork: only async-signal-safe
  // calls happen between fork and exec.
  std::vector<char*> argv;
  for (const std::string& a : options.argv) {
    argv.push_back(const_cast<char*>(a.c_str()));
  }
  argv.push_back(nullptr);
  std::vector<std::string> env_storage;
  for (char** e = environ; *e != nullptr; ++e) env_storage.push_back(*e);
  for (const std::string& e : options.env) env_storage.push_back(e);
  std::vector<char*> envp;
  for (const std::string& e : env_storage) {
    envp.push_back(const_cast<char*>(e.c_str()));
  }
  envp.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    if (log_fd >= 0) close(log_fd);
    return absl::InternalError(
        absl::StrCat("fork failed: ", std::strerror(errno)));
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);  // the parent already died
    // Signals blocked in the parent (servers block SIGTERM to sigwait) must
    // not stay blocked in the child.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (log_fd >= 0) {
      dup2(log_fd, STDOUT_FILENO);
      dup2(log_fd, STDERR_FILENO);
    }
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  if (log_fd >= 0) close(log_fd);
  return Subprocess(pid);
}

Subprocess::Subprocess(Subprocess&& other) noexcept
    : pid_(other.pid_), status_(other.status_) {
  other.pid_ = -1;
}

Subprocess& Subprocess::operator=(Subprocess&& other) noexcept {
  if (this != &other) {
    if (running()) Stop(std::chrono::milliseconds(0));
    pid_ = other.pid_;
    status_ = other.status_;
    other.pid_ = -1;
  }
  return *this;
}

Subprocess::~Subprocess() {
  if (running()) {
    kill(pid_, SIGKILL);
    int status;
    waitpid(pid_, &status, 0);
  }
}

void Subprocess::Signal(int signo) {
  if (running()) kill(pid_, signo);
}

std::optional<int> Subprocess::Poll() {
  if (pid_ <= 0) return std::nullopt;
  if (status_.has_value()) return status_;
  int status;
  const pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) status_ = status;
  return status_;
}

absl::StatusOr<int> Subprocess::Wait(std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  auto sleep = std::chrono::milliseconds(1);
  while (true) {
    if (auto s = Poll()) return *s;
    if (std::chrono::steady_clock::now() >= until) {
      return absl::DeadlineExceededError(
          absl::StrCat("process ", pid_, " still running"));
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::milliseconds(50));
  }
}

int Subprocess::Stop(std::chrono::milliseconds grace) {
  if (auto s = Poll()) return *s;
  Signal(SIGTERM);
  auto s = Wait(grace);
  if (s.ok()) return *s;
  Signal(SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  status_ = status;
  return status;
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exit code ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return absl::StrCat("signal ", WTERMSIG(status), " (",
                        strsignal(WTERMSIG(status)), ")");
  }
  return absl::StrCat("wait status ", status);
}

char StateFromProcStat(const std::string& stat) {
  const size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return '?';
  return stat[close + 2];
}

bool Subprocess::stopped() const {
  if (!running()) return false;
  absl::StatusOr<std::string> stat =
      ReadSmallFile(DefaultEnv(), absl::StrCat("/proc/", pid_, "/stat"));
  if (!stat.ok()) return false;
  const char state = StateFromProcStat(*stat);
  return state == 'T' || state == 't';
}

std::string SelfDirectory() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  std::string path(buf, static_cast<size_t>(n));
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

absl::StatusOr<std::string> FindBinary(const std::string& name,
                                       const std::vector<std::string>& dirs) {
  const std::string self = SelfDirectory();
  std::vector<std::string> tried;
  for (const std::string& d : dirs) {
    const std::string path =
        d.empty() ? "" : (d[0] == '/' ? d : self + "/" + d) + "/" + name;
    if (path.empty()) continue;
    if (access(path.c_str(), X_OK) == 0) return path;
    tried.push_back(path);
  }
  return absl::NotFoundError(absl::StrCat("cannot find ", name, " (looked at ",
                                          absl::StrJoin(tried, ", "), ")"));
}

}  // namespace zeroshard
