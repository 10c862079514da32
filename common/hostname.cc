#include "common/hostname.h"

#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/strip.h"

namespace zeroshard {

std::string LocalHostname() {
  const char* env = std::getenv("HOSTNAME");
  if (env != nullptr && env[0] != '\0') return env;
  char buf[HOST_NAME_MAX + 1] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "";
  return buf;
}

bool IsLoopbackAddress(absl::string_view address) {
  for (absl::string_view scheme : {"ipv4:", "ipv6:", "dns:///", "dns:"}) {
    if (absl::ConsumePrefix(&address, scheme)) break;
  }
  if (absl::StartsWith(address, "unix:")) return true;
  absl::string_view host = address;
  if (absl::ConsumePrefix(&host, "[")) {
    host = host.substr(0, host.find(']'));
  } else if (std::count(host.begin(), host.end(), ':') == 1) {
    host = host.substr(0, host.find(':'));  // else a bare IPv6 literal
  }
  return host == "localhost" || absl::StartsWith(host, "127.") || host == "::1";
}

}  // namespace zeroshard
