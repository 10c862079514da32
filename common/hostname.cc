#include "common/hostname.h"

#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
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

absl::StatusOr<int> AddressPort(absl::string_view address) {
  for (size_t i = 0; i < address.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(address[i]);
    if (c <= ' ' || c >= 0x7f) {
      return absl::InvalidArgumentError(
          absl::StrCat("server address ", absl::CHexEscape(address), ": byte ",
                       i, " is a space, a control character or not ASCII"));
    }
  }
  absl::string_view rest = address;
  for (absl::string_view scheme : {"ipv4:", "ipv6:", "dns:///", "dns:"}) {
    if (absl::ConsumePrefix(&rest, scheme)) break;
  }
  if (absl::StartsWith(rest, "unix:") ||
      absl::StartsWith(rest, "unix-abstract:")) {
    return 0;
  }
  size_t colon;
  if (absl::StartsWith(rest, "[")) {
    const size_t close = rest.find(']');
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "server address \"", address, "\": no ] after the IPv6 host"));
    }
    if (close + 1 == rest.size()) return 0;
    colon = close + 1;
    if (rest[colon] != ':') {
      return absl::InvalidArgumentError(absl::StrCat(
          "server address \"", address, "\": expected :port after ]"));
    }
  } else {
    if (std::count(rest.begin(), rest.end(), ':') != 1) return 0;
    colon = rest.find(':');
  }
  const absl::string_view host = rest.substr(0, colon);
  const absl::string_view port_text = rest.substr(colon + 1);
  int port = 0;
  const bool digits =
      !port_text.empty() && port_text.size() <= 5 &&
      port_text.find_first_not_of("0123456789") == absl::string_view::npos &&
      absl::SimpleAtoi(port_text, &port);
  if (host.empty() || host == "[]") {
    return absl::InvalidArgumentError(
        absl::StrCat("server address \"", address, "\": no host before :"));
  }
  if (!digits || port < 1 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("server address \"", address, "\": port \"", port_text,
                     "\" is not a number in 1..65535"));
  }
  return port;
}

absl::Status CheckServerAddress(absl::string_view address) {
  absl::StatusOr<int> port = AddressPort(address);
  if (!port.ok() || *port != 0) return port.status();
  absl::string_view rest = address;
  for (absl::string_view scheme : {"ipv4:", "ipv6:", "dns:///", "dns:"}) {
    if (absl::ConsumePrefix(&rest, scheme)) break;
  }
  if (absl::StartsWith(rest, "unix:") ||
      absl::StartsWith(rest, "unix-abstract:")) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "server address \"", address,
      "\" has no port: give host:port (the port the server's --port or "
      "--port_file names)"));
}

}  // namespace zeroshard
