#include "tests/bench/tcp_pump.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace zeroshard {
namespace bench {
namespace {

// Command from this process to a peer: an op byte and a length.
struct Command {
  uint64_t op;  // 'G' peer sends, 'P' peer receives then acks, 'Q' quit
  uint64_t bytes;
};

bool WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = send(fd, p, std::min(n, kTcpIoBytes), MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool ReadAll(int fd, void* out, size_t n) {
  char* p = static_cast<char*>(out);
  while (n > 0) {
    const ssize_t r = recv(fd, p, std::min(n, kTcpIoBytes), 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// The peer's life: connect, then serve commands until 'Q' or EOF.
[[noreturn]] void PeerMain(uint16_t port, uint64_t capacity) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 ||
      connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    _exit(3);
  }
  char* buf = static_cast<char*>(std::malloc(std::max<uint64_t>(capacity, 1)));
  if (buf == nullptr) _exit(4);
  for (uint64_t i = 0; i < capacity; ++i) buf[i] = static_cast<char>(i * 7);
  while (true) {
    Command c;
    if (!ReadAll(fd, &c, sizeof(c)) || c.op == 'Q') _exit(0);
    if (c.bytes > capacity) _exit(5);
    if (c.op == 'G') {
      if (!WriteAll(fd, buf, c.bytes)) _exit(6);
    } else if (c.op == 'P') {
      const char ack = 'A';
      if (!ReadAll(fd, buf, c.bytes) || !WriteAll(fd, &ack, 1)) _exit(7);
    } else {
      _exit(8);
    }
  }
}

absl::Status Errno(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpPump>> TcpPump::Start(int pairs,
                                                        uint64_t bytes) {
  if (pairs < 1) return absl::InvalidArgumentError("pairs must be >= 1");
  auto pump = std::unique_ptr<TcpPump>(new TcpPump());
  pump->capacity_ = bytes;
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  if (listener < 0) return Errno("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listener, pairs) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(listener);
    return Errno("bind/listen on 127.0.0.1");
  }
  const uint16_t port = ntohs(addr.sin_port);
  const uint64_t share = (bytes + pairs - 1) / pairs;
  for (int i = 0; i < pairs; ++i) {
    const pid_t pid = fork();
    if (pid < 0) {
      close(listener);
      return Errno("fork");
    }
    if (pid == 0) {
      close(listener);
      PeerMain(port, share);
    }
    pump->pids_.push_back(pid);
  }
  for (int i = 0; i < pairs; ++i) {
    const int fd = accept(listener, nullptr, nullptr);
    if (fd < 0) {
      close(listener);
      return Errno("accept");
    }
    pump->fds_.push_back(fd);
  }
  close(listener);
  return pump;
}

TcpPump::~TcpPump() {
  for (int fd : fds_) {
    const Command quit{'Q', 0};
    WriteAll(fd, &quit, sizeof(quit));
    close(fd);
  }
  for (pid_t pid : pids_) {
    int status = 0;
    waitpid(pid, &status, 0);
  }
}

void TcpPump::Share(uint64_t bytes, int i, uint64_t* begin,
                    uint64_t* end) const {
  const uint64_t n = fds_.size();
  const uint64_t share = (bytes + n - 1) / n;
  *begin = std::min(bytes, share * i);
  *end = std::min(bytes, *begin + share);
}

absl::StatusOr<double> TcpPump::Gather(char* out, uint64_t bytes) {
  if (bytes > capacity_) return absl::InvalidArgumentError("too many bytes");
  std::vector<char> ok(fds_.size(), 0);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (size_t i = 0; i < fds_.size(); ++i) {
    threads.emplace_back([&, i] {
      uint64_t b, e;
      Share(bytes, static_cast<int>(i), &b, &e);
      const Command c{'G', e - b};
      ok[i] =
          WriteAll(fds_[i], &c, sizeof(c)) && ReadAll(fds_[i], out + b, e - b);
    });
  }
  for (std::thread& t : threads) t.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  for (char o : ok) {
    if (!o) return absl::InternalError("a TCP peer went away during gather");
  }
  return seconds;
}

absl::StatusOr<double> TcpPump::Push(const char* data, uint64_t bytes) {
  if (bytes > capacity_) return absl::InvalidArgumentError("too many bytes");
  std::vector<char> ok(fds_.size(), 0);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (size_t i = 0; i < fds_.size(); ++i) {
    threads.emplace_back([&, i] {
      uint64_t b, e;
      Share(bytes, static_cast<int>(i), &b, &e);
      const Command c{'P', e - b};
      char ack = 0;
      ok[i] = WriteAll(fds_[i], &c, sizeof(c)) &&
              WriteAll(fds_[i], data + b, e - b) && ReadAll(fds_[i], &ack, 1) &&
              ack == 'A';
    });
  }
  for (std::thread& t : threads) t.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  for (char o : ok) {
    if (!o) return absl::InternalError("a TCP peer went away during push");
  }
  return seconds;
}

}  // namespace bench
}  // namespace zeroshard
