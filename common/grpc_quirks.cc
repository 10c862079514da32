#include "common/grpc_quirks.h"

#include <cerrno>

#include "absl/base/internal/sysinfo.h"

namespace zeroshard {

void PrepareForGrpcClients() {
  const int saved = errno;
  // Cached by Abseil after the first call (the same call a contended
  // absl::Mutex makes).
  (void)absl::base_internal::NominalCPUFrequency();
  errno = saved;
}

}  // namespace zeroshard
