#include "common/quiet_port.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/env/env.h"

namespace zeroshard {
namespace {

// Binds 127.0.0.1:port (0: any) and returns the bound port, or -errno.
int TryBind(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t len = sizeof(a);
  int result = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    result = -errno;
  } else {
    result = ntohs(a.sin_port);
  }
  close(fd);
  return result;
}

bool AllFree(int first, int count) {
  for (int p = first; p < first + count; ++p) {
    if (p > 65535 || TryBind(p) != p) return false;
  }
  return true;
}

}  // namespace

std::pair<int, int> EphemeralRange(absl::string_view text) {
  std::istringstream in{std::string(text)};
  int first = 0, last = 0;
  if (in >> first >> last && first >= 1 && first <= last && last <= 65535) {
    return {first, last};
  }
  return {32768, 60999};
}

absl::StatusOr<int> QuietPort(int count) {
  count = std::max(count, 1);
  absl::StatusOr<std::string> text =
      ReadSmallFile(DefaultEnv(), "/proc/sys/net/ipv4/ip_local_port_range");
  const int first = EphemeralRange(text.ok() ? *text : "").first;
  const int lo = std::max(1024, first - 10000);
  const int hi = first - count;  // the last candidate: P + count - 1 < first
  if (hi >= lo) {
    std::mt19937 rng(std::random_device{}());
    std::uniform_int_distribution<int> pick(lo, hi);
    for (int tries = 0; tries < 200; ++tries) {
      const int p = pick(rng);
      if (AllFree(p, count)) return p;
    }
  }
  for (int tries = 0; tries < 200; ++tries) {
    const int p = TryBind(0);
    if (p < 0) {
      return absl::InternalError(
          absl::StrCat("bind 127.0.0.1:0: ", std::strerror(-p)));
    }
    if (AllFree(p, count)) return p;
  }
  return absl::InternalError(
      absl::StrCat("no ", count, " free consecutive ports on 127.0.0.1"));
}

}  // namespace zeroshard
