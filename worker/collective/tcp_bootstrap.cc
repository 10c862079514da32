#include "worker/collective/tcp_bootstrap.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "common/unique_fd.h"

namespace zeroshard {
namespace collective {
namespace {

constexpr uint32_t kHello = 0x5a534231;  // "ZSB1"
constexpr uint32_t kTable = 0x5a534254;  // "ZSBT"
constexpr uint32_t kMaxBlob = 1 << 20;

int MillisLeft(absl::Time deadline) {
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(
      std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1 << 30));
}

// Waits for `events` on fd until deadline: OK, DEADLINE_EXCEEDED or errno.
absl::Status PollFd(int fd, short events, absl::Time deadline,
                    const std::string& what) {
  while (true) {
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, MillisLeft(deadline));
    if (n > 0) return absl::OkStatus();
    if (n == 0) return absl::DeadlineExceededError(what);
    if (errno != EINTR) {
      return absl::InternalError(absl::StrCat("poll: ", strerror(errno)));
    }
  }
}

absl::Status WriteFull(int fd, const void* data, size_t n, absl::Time deadline,
                       const std::string& what) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ZS_RETURN_IF_ERROR(PollFd(fd, POLLOUT, deadline, what));
    const ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k <= 0) {
      return absl::UnavailableError(
          absl::StrCat(what, ": send: ", strerror(errno)));
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
  return absl::OkStatus();
}

absl::Status ReadFull(int fd, void* data, size_t n, absl::Time deadline,
                      const std::string& what) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ZS_RETURN_IF_ERROR(PollFd(fd, POLLIN, deadline, what));
    const ssize_t k = recv(fd, p, n, 0);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k == 0) {
      return absl::UnavailableError(
          absl::StrCat(what, ": connection closed by the other side"));
    }
    if (k < 0) {
      return absl::UnavailableError(
          absl::StrCat(what, ": recv: ", strerror(errno)));
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
  return absl::OkStatus();
}

absl::Status WriteU32(int fd, uint32_t v, absl::Time deadline,
                      const std::string& what) {
  return WriteFull(fd, &v, sizeof(v), deadline, what);
}

absl::StatusOr<uint32_t> ReadU32(int fd, absl::Time deadline,
                                 const std::string& what) {
  uint32_t v = 0;
  ZS_RETURN_IF_ERROR(ReadFull(fd, &v, sizeof(v), deadline, what));
  return v;
}

absl::StatusOr<std::string> ReadBlob(int fd, absl::Time deadline,
                                     const std::string& what) {
  ZS_ASSIGN_OR_RETURN(uint32_t len, ReadU32(fd, deadline, what));
  if (len > kMaxBlob) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": blob of ", len, " bytes is too large"));
  }
  std::string s(len, '\0');
  ZS_RETURN_IF_ERROR(ReadFull(fd, s.data(), len, deadline, what));
  return s;
}

absl::Status ParseHostPort(const std::string& address, std::string* host,
                           int* port) {
  const size_t colon = address.rfind(':');
  int p = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &p) || p < 0 || p > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bootstrap: coordinator address '", address, "' is not host:port"));
  }
  *host = address.substr(0, colon);
  if (host->size() > 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  *port = p;
  return absl::OkStatus();
}

absl::StatusOr<addrinfo*> Resolve(const std::string& host, int port,
                                  bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const int rc =
      getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) {
    // A name not (yet) known may appear: a Kubernetes pod's DNS record is
    // published some time after the pod starts. The callers retry these.
    const bool later = rc == EAI_NONAME || rc == EAI_AGAIN || rc == EAI_NODATA;
    const std::string msg = absl::StrCat("bootstrap: cannot resolve '", host,
                                         "': ", gai_strerror(rc));
    return later ? absl::UnavailableError(msg)
                 : absl::InvalidArgumentError(msg);
  }
  return res;
}

// Resolve, retrying a name that is not known yet until `deadline`.
absl::StatusOr<addrinfo*> ResolveBy(const std::string& host, int port,
                                    bool passive, absl::Time deadline,
                                    absl::Duration timeout) {
  while (true) {
    absl::StatusOr<addrinfo*> res = Resolve(host, port, passive);
    if (res.ok() || !absl::IsUnavailable(res.status())) return res;
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(res.status().message(), " (still, after ",
                       absl::FormatDuration(timeout), ")"));
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpBootstrap>> TcpBootstrap::Create(
    TcpBootstrapOptions options) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bootstrap: rank ", options.rank, " not in [0, ", options.size, ")"));
  }
  std::unique_ptr<TcpBootstrap> b(new TcpBootstrap(std::move(options)));
  if (b->options_.size == 1) return b;
  ZS_RETURN_IF_ERROR(
      ParseHostPort(b->options_.coordinator, &b->host_, &b->port_));
  if (b->options_.rank != 0) return b;
  ZS_ASSIGN_OR_RETURN(
      addrinfo * res,
      ResolveBy(b->host_, b->port_, true, absl::Now() + b->options_.timeout,
                b->options_.timeout));
  int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (fd < 0 || bind(fd, res->ai_addr, res->ai_addrlen) != 0 ||
      listen(fd, 1024) != 0) {
    const int e = errno;
    freeaddrinfo(res);
    if (fd >= 0) close(fd);
    return absl::UnavailableError(absl::StrCat(
        "bootstrap: rank 0 cannot listen at ", b->options_.coordinator, ": ",
        strerror(e),
        e == EADDRINUSE ? " (another process holds that port: pick another; "
                          "under torchrun's static rendezvous the workers "
                          "meet on MASTER_PORT + 1)"
                        : ""));
  }
  freeaddrinfo(res);
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  b->port_ = ntohs(addr.ss_family == AF_INET6
                       ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                       : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  b->listen_fd_ = fd;
  return b;
}

TcpBootstrap::~TcpBootstrap() {
  if (listen_fd_ >= 0) close(listen_fd_);
}

absl::StatusOr<std::vector<std::string>> TcpBootstrap::AllGather(
    const std::string& mine) {
  if (mine.size() > kMaxBlob) {
    return absl::InvalidArgumentError("bootstrap: blob too large");
  }
  if (options_.size == 1) return std::vector<std::string>{mine};
  return options_.rank == 0 ? Serve(mine) : Join(mine);
}

absl::StatusOr<std::vector<std::string>> TcpBootstrap::Serve(
    const std::string& mine) {
  const int w = options_.size;
  const absl::Time deadline = absl::Now() + options_.timeout;
  const std::string where = absl::StrCat(host_, ":", port_);
  std::vector<std::string> blobs(w);
  std::vector<bool> present(w, false);
  std::vector<UniqueFd> conns(w);
  blobs[0] = mine;
  present[0] = true;
  int missing = w - 1;
  while (missing > 0) {
    absl::Status s = PollFd(listen_fd_, POLLIN, deadline, "");
    if (absl::IsDeadlineExceeded(s)) {
      std::vector<int> absent;
      for (int r = 0; r < w; ++r) {
        if (!present[r]) absent.push_back(r);
      }
      return absl::DeadlineExceededError(absl::StrCat(
          "bootstrap: rank", absent.size() > 1 ? "s " : " ",
          absl::StrJoin(absent, ", "), " of ", w, " did not check in at ",
          where, " within ", absl::FormatDuration(options_.timeout)));
    }
    ZS_RETURN_IF_ERROR(s);
    UniqueFd conn(accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC));
    if (conn.get() < 0) continue;
    const std::string what = "bootstrap: reading a peer's hello";
    ZS_ASSIGN_OR_RETURN(uint32_t magic, ReadU32(conn.get(), deadline, what));
    if (magic != kHello) continue;  // not one of ours
    ZS_ASSIGN_OR_RETURN(uint32_t rank, ReadU32(conn.get(), deadline, what));
    ZS_ASSIGN_OR_RETURN(uint32_t size, ReadU32(conn.get(), deadline, what));
    ZS_ASSIGN_OR_RETURN(std::string blob, ReadBlob(conn.get(), deadline, what));
    if (size != static_cast<uint32_t>(w)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bootstrap: rank ", rank, " thinks the world size is ",
                       size, ", rank 0 says ", w));
    }
    if (rank == 0 || rank >= size || present[rank]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bootstrap: rank ", rank, " checked in twice or is out of range"));
    }
    present[rank] = true;
    blobs[rank] = std::move(blob);
    conns[rank] = std::move(conn);
    --missing;
  }
  for (int r = 1; r < w; ++r) {
    const std::string what =
        absl::StrCat("bootstrap: sending table to rank ", r);
    ZS_RETURN_IF_ERROR(WriteU32(conns[r].get(), kTable, deadline, what));
    ZS_RETURN_IF_ERROR(WriteU32(conns[r].get(), w, deadline, what));
    for (const std::string& b : blobs) {
      ZS_RETURN_IF_ERROR(WriteU32(conns[r].get(), b.size(), deadline, what));
      ZS_RETURN_IF_ERROR(
          WriteFull(conns[r].get(), b.data(), b.size(), deadline, what));
    }
  }
  return blobs;
}

absl::StatusOr<std::vector<std::string>> TcpBootstrap::Join(
    const std::string& mine) {
  const absl::Time deadline = absl::Now() + options_.timeout;
  const std::string where = absl::StrCat(host_, ":", port_);
  UniqueFd conn;
  std::string last_error = "no attempt";
  while (conn.get() < 0) {
    ZS_ASSIGN_OR_RETURN(addrinfo * res, ResolveBy(host_, port_, false, deadline,
                                                  options_.timeout));
    for (addrinfo* a = res; a != nullptr && conn.get() < 0; a = a->ai_next) {
      UniqueFd fd(socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
      if (fd.get() >= 0 && connect(fd.get(), a->ai_addr, a->ai_addrlen) == 0) {
        conn = std::move(fd);
      } else {
        last_error = strerror(errno);
      }
    }
    freeaddrinfo(res);
    if (conn.get() >= 0) break;
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "bootstrap: rank ", options_.rank, " could not reach rank 0 at ",
          where, " within ", absl::FormatDuration(options_.timeout), ": ",
          last_error));
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  const int one = 1;
  setsockopt(conn.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  const std::string what = absl::StrCat("bootstrap: rank ", options_.rank,
                                        " checking in at rank 0 (", where, ")");
  ZS_RETURN_IF_ERROR(WriteU32(conn.get(), kHello, deadline, what));
  ZS_RETURN_IF_ERROR(WriteU32(conn.get(), options_.rank, deadline, what));
  ZS_RETURN_IF_ERROR(WriteU32(conn.get(), options_.size, deadline, what));
  ZS_RETURN_IF_ERROR(WriteU32(conn.get(), mine.size(), deadline, what));
  ZS_RETURN_IF_ERROR(
      WriteFull(conn.get(), mine.data(), mine.size(), deadline, what));
  const std::string wait = absl::StrCat(
      "bootstrap: rank ", options_.rank, " got no peer table from rank 0 at ",
      where, " within ", absl::FormatDuration(options_.timeout),
      " (are all ranks started?)");
  ZS_ASSIGN_OR_RETURN(uint32_t magic, ReadU32(conn.get(), deadline, wait));
  ZS_ASSIGN_OR_RETURN(uint32_t w, ReadU32(conn.get(), deadline, wait));
  if (magic != kTable || w != static_cast<uint32_t>(options_.size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bootstrap: bad table from rank 0 at ", where));
  }
  std::vector<std::string> blobs;
  for (uint32_t r = 0; r < w; ++r) {
    ZS_ASSIGN_OR_RETURN(std::string b, ReadBlob(conn.get(), deadline, wait));
    blobs.push_back(std::move(b));
  }
  return blobs;
}

}  // namespace collective
}  // namespace zeroshard
