#include "common/metrics/http_exporter.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace zeroshard::metrics {
namespace {

using Clock = std::chrono::steady_clock;

// The longest request head (request line and headers) read; longer ones
// are answered 431.
constexpr size_t kMaxHeadBytes = 8192;

struct Connection {
  enum class State { kReading, kWriting, kDraining };
  int fd = -1;
  State state = State::kReading;
  Clock::time_point deadline;
  std::string in, out;
  size_t sent = 0;
};

std::string Response(int code, absl::string_view reason, absl::string_view type,
                     const std::string& body, bool head_only,
                     absl::string_view extra_headers = "") {
  std::string r =
      absl::StrCat("HTTP/1.1 ", code, " ", reason, "\r\nContent-Type: ", type,
                   "\r\nContent-Length: ", body.size(),
                   "\r\nConnection: close\r\n", extra_headers, "\r\n");
  if (!head_only) r += body;
  return r;
}

// The end of the request head in `in` (just past its blank line), or 0.
size_t HeadEnd(const std::string& in) {
  const size_t crlf = in.find("\r\n\r\n");
  const size_t lf = in.find("\n\n");
  if (crlf != std::string::npos && (lf == std::string::npos || crlf < lf)) {
    return crlf + 4;
  }
  return lf == std::string::npos ? 0 : lf + 2;
}

// The response to a complete request head.
std::string Respond(absl::string_view head, Registry* registry) {
  while (absl::StartsWith(head, "\r\n") || absl::StartsWith(head, "\n")) {
    head.remove_prefix(head[0] == '\r' ? 2 : 1);  // RFC 9112 2.2
  }
  absl::string_view line = head.substr(0, head.find('\n'));
  if (absl::EndsWith(line, "\r")) line.remove_suffix(1);
  const std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
  if (parts.size() != 3 || parts[0].empty() || parts[1].empty() ||
      !absl::StartsWith(parts[2], "HTTP/1.")) {
    return Response(400, "Bad Request", "text/plain", "bad request\n", false);
  }
  const bool head_only = parts[0] == "HEAD";
  if (parts[0] != "GET" && !head_only) {
    return Response(405, "Method Not Allowed", "text/plain",
                    "only GET and HEAD\n", false, "Allow: GET, HEAD\r\n");
  }
  const absl::string_view path = parts[1].substr(0, parts[1].find('?'));
  if (path == "/metrics") {
    return Response(200, "OK", "text/plain; version=0.0.4; charset=utf-8",
                    registry->Render(), head_only);
  }
  if (path == "/healthz") {
    return Response(200, "OK", "text/plain", "ok\n", head_only);
  }
  return Response(404, "Not Found", "text/plain", "not found\n", head_only);
}

bool WouldBlock() {
  return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
}

// Listens on host:port; the socket, or -1 with errno set.
int Listen(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* list = nullptr;
  const std::string service = std::to_string(port);
  if (getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(),
                  &hints, &list) != 0) {
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = list; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                a->ai_protocol);
    if (fd < 0) continue;
    // SO_REUSEADDR only: SO_REUSEPORT would let a second process share a
    // busy port silently.
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 128) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(list);
  return fd;
}

// Reads what `c` sent; false when the connection is to be closed.
bool ReadHead(Connection& c, Registry* registry,
              std::chrono::nanoseconds write_timeout) {
  char buf[4096];
  while (c.in.size() < kMaxHeadBytes) {
    const ssize_t n =
        recv(c.fd, buf, std::min(sizeof(buf), kMaxHeadBytes - c.in.size()), 0);
    if (n == 0) return false;
    if (n < 0) return WouldBlock();
    c.in.append(buf, static_cast<size_t>(n));
    if (HeadEnd(c.in) != 0) break;
  }
  const size_t end = HeadEnd(c.in);
  if (end == 0 && c.in.size() < kMaxHeadBytes) return true;
  c.out = end != 0 ? Respond(absl::string_view(c.in).substr(0, end), registry)
                   : Response(431, "Request Header Fields Too Large",
                              "text/plain", "request head too large\n", false);
  c.state = Connection::State::kWriting;
  c.deadline = Clock::now() + write_timeout;
  return true;
}

// Sends what is left of the response; false when the connection is to be
// closed. Once all is sent, stops writing and drains until the client
// closes (closing with unread input would reset the connection and could
// destroy the response before the client read it).
bool WriteResponse(Connection& c) {
  while (c.sent < c.out.size()) {
    const ssize_t n =
        send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
    if (n < 0) return WouldBlock();
    c.sent += static_cast<size_t>(n);
  }
  shutdown(c.fd, SHUT_WR);
  c.state = Connection::State::kDraining;
  return true;
}

bool Drain(Connection& c) {
  char buf[4096];
  for (;;) {
    const ssize_t n = recv(c.fd, buf, sizeof(buf), 0);
    if (n == 0) return false;
    if (n < 0) return WouldBlock();
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpExporter>> HttpExporter::Start(
    const std::string& host, int port, Registry* registry,
    const HttpExporterOptions& options) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics port ", port, " is not in [0, 65535]"));
  }
  if (options.max_connections < 1 ||
      options.head_timeout <= absl::ZeroDuration() ||
      options.write_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "metrics endpoint: max_connections and the timeouts must be "
        "positive");
  }
  std::unique_ptr<HttpExporter> e(new HttpExporter());
  e->host_ = host;
  e->registry_ = registry;
  e->options_ = options;
  e->listen_fd_ = Listen(host, port);
  if (e->listen_fd_ < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for metrics on ", host, ":", port,
                     " (address in use or not available)"));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  if (getsockname(e->listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len) !=
      0) {
    return absl::UnavailableError(
        absl::StrCat("metrics endpoint on ", host, ":", port,
                     ": getsockname failed: errno ", errno));
  }
  e->port_ = ntohs(bound.ss_family == AF_INET6
                       ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                       : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  if (pipe2(e->wake_, O_NONBLOCK | O_CLOEXEC) != 0) {
    return absl::UnavailableError(absl::StrCat("metrics endpoint on ", host,
                                               ":", e->port_, ": pipe failed"));
  }
  e->thread_ = std::thread([raw = e.get()] { raw->Serve(); });
  return e;
}

HttpExporter::~HttpExporter() {
  stop_ = true;
  if (wake_[1] >= 0) (void)!write(wake_[1], "x", 1);
  if (thread_.joinable()) thread_.join();
  for (int fd : {listen_fd_, wake_[0], wake_[1]}) {
    if (fd >= 0) close(fd);
  }
}

std::string HttpExporter::address() const {
  return absl::StrCat(host_, ":", port_);
}

void HttpExporter::Serve() {
  const auto head_timeout = absl::ToChronoNanoseconds(options_.head_timeout);
  const auto write_timeout = absl::ToChronoNanoseconds(options_.write_timeout);
  std::vector<Connection> conns;  // in accept order
  std::vector<pollfd> fds;
  // accept() failing for want of descriptors leaves the listener readable:
  // stop polling it for a moment instead of spinning.
  Clock::time_point accept_after{};
  auto close_if = [&conns](auto&& pred) {
    auto end = std::remove_if(conns.begin(), conns.end(), [&](Connection& c) {
      if (!pred(c)) return false;
      close(c.fd);
      return true;
    });
    conns.erase(end, conns.end());
  };
  while (!stop_.load()) {
    const Clock::time_point now = Clock::now();
    close_if([this, now](const Connection& c) {
      if (c.deadline > now) return false;
      if (c.state == Connection::State::kWriting) ++responses_cut_;
      return true;
    });
    fds.clear();
    fds.push_back({wake_[0], POLLIN, 0});
    fds.push_back({now >= accept_after ? listen_fd_ : -1, POLLIN, 0});
    Clock::time_point wake_at =
        now >= accept_after ? Clock::time_point::max() : accept_after;
    for (const Connection& c : conns) {
      const short events =
          c.state == Connection::State::kWriting ? POLLOUT : POLLIN;
      fds.push_back({c.fd, events, 0});
      wake_at = std::min(wake_at, c.deadline);
    }
    int timeout_ms = -1;
    if (wake_at != Clock::time_point::max()) {
      const auto ms =
          std::chrono::ceil<std::chrono::milliseconds>(wake_at - now);
      timeout_ms = static_cast<int>(std::clamp<int64_t>(ms.count(), 0, 60000));
    }
    const int ready = poll(fds.data(), fds.size(), timeout_ms);
    if (ready < 0) continue;  // EINTR, or ENOMEM: try again
    if (fds[0].revents != 0) break;
    for (size_t i = 0; i < conns.size(); ++i) {
      Connection& c = conns[i];
      if (fds[i + 2].revents == 0) continue;
      bool keep = true;
      if (c.state == Connection::State::kReading) {
        keep = ReadHead(c, registry_, write_timeout);
      }
      if (keep && c.state == Connection::State::kWriting) {
        keep = WriteResponse(c);
      }
      if (keep && c.state == Connection::State::kDraining) keep = Drain(c);
      if (!keep) {
        close(c.fd);
        c.fd = -1;
      }
    }
    conns.erase(std::remove_if(conns.begin(), conns.end(),
                               [](const Connection& c) { return c.fd < 0; }),
                conns.end());
    if ((fds[1].revents & POLLIN) == 0) continue;
    for (;;) {
      const int fd =
          accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
            errno != ECONNABORTED) {
          accept_after = Clock::now() + std::chrono::milliseconds(100);
        }
        break;
      }
      if (static_cast<int>(conns.size()) >= options_.max_connections) {
        close(conns.front().fd);  // the oldest
        conns.erase(conns.begin());
      }
      Connection c;
      c.fd = fd;
      c.deadline = Clock::now() + head_timeout;
      conns.push_back(std::move(c));
    }
  }
  for (Connection& c : conns) close(c.fd);
}

}  // namespace zeroshard::metrics
