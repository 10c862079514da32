#include "common/hostname.h"

#include <limits.h>
#include <unistd.h>

#include <cstdlib>

namespace zeroshard {

std::string LocalHostname() {
  const char* env = std::getenv("HOSTNAME");
  if (env != nullptr && env[0] != '\0') return env;
  char buf[HOST_NAME_MAX + 1] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "";
  return buf;
}

}  // namespace zeroshard
