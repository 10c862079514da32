#include "worker/collective/ucx_communicator.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/env/env.h"
#include "common/hostname.h"
#include "common/status_macros.h"
#include "worker/collective/tcp_bootstrap.h"
#include "worker/collective/ucx_transport.h"

namespace zeroshard {
namespace collective {
namespace {

absl::Status IntFromEnv(const char* name, bool required, int* value) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') {
    if (!required) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(name, " is not set"));
  }
  if (!absl::SimpleAtoi(text, value)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, "='", text, "' is not an integer"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<UcxCommunicatorConfig> UcxCommunicatorConfig::FromEnv() {
  UcxCommunicatorConfig c;
  ZS_RETURN_IF_ERROR(IntFromEnv("ZEROSHARD_RANK", true, &c.rank));
  ZS_RETURN_IF_ERROR(IntFromEnv("ZEROSHARD_WORLD_SIZE", true, &c.world_size));
  ZS_RETURN_IF_ERROR(IntFromEnv("ZEROSHARD_LOCAL_RANK", false, &c.local_rank));
  ZS_RETURN_IF_ERROR(IntFromEnv("ZEROSHARD_LOCAL_SIZE", false, &c.local_size));
  const char* coord = std::getenv("ZEROSHARD_COORD");
  if (c.world_size > 1 && (coord == nullptr || *coord == '\0')) {
    return absl::InvalidArgumentError("ZEROSHARD_COORD is not set");
  }
  if (coord != nullptr) c.coordinator = coord;
  return c;
}

absl::StatusOr<std::unique_ptr<HostCommunicator>> CreateUcxCommunicator(
    const UcxCommunicatorConfig& config) {
  if (config.local_size < 1 || config.world_size % config.local_size != 0 ||
      config.local_rank < 0 || config.local_rank >= config.local_size ||
      config.rank % config.local_size != config.local_rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "collective: rank ", config.rank, " of ", config.world_size,
        " with local rank ", config.local_rank, " of ", config.local_size,
        ": ranks must be numbered node-major (rank = node * local_size + "
        "local_rank) and local_size must divide the world size"));
  }
  TcpBootstrapOptions b;
  b.rank = config.rank;
  b.size = config.world_size;
  b.coordinator = config.coordinator;
  b.timeout = config.bootstrap_timeout;
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<TcpBootstrap> bootstrap,
                      TcpBootstrap::Create(b));
  if (config.rank == 0 && !config.port_file.empty()) {
    ZS_RETURN_IF_ERROR(WriteFileAtomic(DefaultEnv(), config.port_file,
                                       absl::StrCat(bootstrap->port(), "\n")));
  }
  HostCommunicatorOptions options;
  options.part_alignment = config.part_alignment;
  options.local_size = config.local_size;
  options.op_timeout = config.op_timeout;
  UcxTransportOptions transport;
  transport.loopback_only = zeroshard::IsLoopbackAddress(config.coordinator);
  return CreateUcxCommunicator(*bootstrap, options, transport);
}

absl::StatusOr<std::unique_ptr<HostCommunicator>> CreateUcxCommunicator(
    Bootstrap& bootstrap, const HostCommunicatorOptions& options,
    const UcxTransportOptions& transport_options) {
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<Transport> transport,
                      CreateUcxTransport(bootstrap, transport_options));
  return HostCommunicator::Create(std::move(transport), options);
}

}  // namespace collective
}  // namespace zeroshard
