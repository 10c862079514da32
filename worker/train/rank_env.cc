#include "worker/train/rank_env.h"

#include <cstdlib>
#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace zeroshard::train {
namespace {

absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError(message);
}

// The variable's value; nullopt when unset or empty.
std::optional<std::string> Get(const EnvLookup& lookup, const char* name) {
  const char* v = lookup(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

absl::StatusOr<std::optional<int>> GetInt(const EnvLookup& lookup,
                                          const char* name) {
  std::optional<std::string> text = Get(lookup, name);
  if (!text.has_value()) return std::optional<int>();
  int v = 0;
  if (!absl::SimpleAtoi(*text, &v)) {
    return Invalid(absl::StrCat(name, "='", *text, "' is not an integer"));
  }
  return std::optional<int>(v);
}

// One value named two ways: `ours` (ZEROSHARD_*) or `theirs` (torchrun's).
// Both set: they must agree.
absl::StatusOr<std::optional<int>> IntPair(const EnvLookup& lookup,
                                           const char* ours,
                                           const char* theirs) {
  ZS_ASSIGN_OR_RETURN(std::optional<int> a, GetInt(lookup, ours));
  ZS_ASSIGN_OR_RETURN(std::optional<int> b, GetInt(lookup, theirs));
  if (a.has_value() && b.has_value() && *a != *b) {
    return Invalid(absl::StrCat(ours, "=", *a, " and ", theirs, "=", *b,
                                " disagree; set one of them, or both the "
                                "same"));
  }
  return a.has_value() ? a : b;
}

// MASTER_ADDR:MASTER_PORT (+1 under torchrun's agent store), or nullopt
// when neither is set.
absl::StatusOr<std::optional<std::string>> TorchCoordinator(
    const EnvLookup& lookup) {
  std::optional<std::string> addr = Get(lookup, "MASTER_ADDR");
  ZS_ASSIGN_OR_RETURN(std::optional<int> port, GetInt(lookup, "MASTER_PORT"));
  if (!addr.has_value() && !port.has_value()) return std::nullopt;
  if (!addr.has_value()) return Invalid("MASTER_PORT is set, MASTER_ADDR not");
  if (!port.has_value()) return Invalid("MASTER_ADDR is set, MASTER_PORT not");
  std::optional<std::string> agent_store =
      Get(lookup, "TORCHELASTIC_USE_AGENT_STORE");
  const bool shifted =
      agent_store.has_value() && absl::EqualsIgnoreCase(*agent_store, "true");
  const int p = *port + (shifted ? 1 : 0);
  if (*port < 0 || p > 65535) {
    return Invalid(absl::StrCat("MASTER_PORT=", *port, " is not a port"));
  }
  const bool v6 = absl::StrContains(*addr, ':') && (*addr)[0] != '[';
  return std::optional<std::string>(
      absl::StrCat(v6 ? "[" : "", *addr, v6 ? "]" : "", ":", p));
}

}  // namespace

absl::StatusOr<collective::UcxCommunicatorConfig> RankConfigFromEnv(
    const EnvLookup& lookup) {
  ZS_ASSIGN_OR_RETURN(std::optional<int> rank,
                      IntPair(lookup, "ZEROSHARD_RANK", "RANK"));
  ZS_ASSIGN_OR_RETURN(std::optional<int> world,
                      IntPair(lookup, "ZEROSHARD_WORLD_SIZE", "WORLD_SIZE"));
  if (!rank.has_value() && !world.has_value()) {
    return Invalid(
        "no rank in the environment: set ZEROSHARD_RANK, "
        "ZEROSHARD_WORLD_SIZE and ZEROSHARD_COORD (as `zeroshard train` "
        "does), or RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (as "
        "torchrun and Kubeflow's PyTorchJob do); or pass --elastic to join "
        "an elastic job through the servers");
  }
  if (!rank.has_value()) {
    return Invalid("a world size is set but no rank: ZEROSHARD_RANK or RANK");
  }
  if (!world.has_value()) {
    return Invalid(
        "a rank is set but no world size: ZEROSHARD_WORLD_SIZE or WORLD_SIZE");
  }
  ZS_ASSIGN_OR_RETURN(std::optional<int> local_rank,
                      IntPair(lookup, "ZEROSHARD_LOCAL_RANK", "LOCAL_RANK"));
  ZS_ASSIGN_OR_RETURN(
      std::optional<int> local_size,
      IntPair(lookup, "ZEROSHARD_LOCAL_SIZE", "LOCAL_WORLD_SIZE"));
  std::optional<std::string> coord = Get(lookup, "ZEROSHARD_COORD");
  ZS_ASSIGN_OR_RETURN(std::optional<std::string> torch,
                      TorchCoordinator(lookup));
  if (coord.has_value() && torch.has_value() && *coord != *torch) {
    return Invalid(absl::StrCat("ZEROSHARD_COORD=", *coord,
                                " and MASTER_ADDR:MASTER_PORT (", *torch,
                                ") disagree; set one of them, or both the "
                                "same"));
  }
  if (!coord.has_value()) coord = torch;
  if (*world > 1 && !coord.has_value()) {
    return Invalid(absl::StrCat(
        "world size ", *world,
        " needs rank 0's address: ZEROSHARD_COORD, or MASTER_ADDR and "
        "MASTER_PORT"));
  }
  collective::UcxCommunicatorConfig c;
  c.rank = *rank;
  c.world_size = *world;
  c.local_rank = local_rank.value_or(0);
  c.local_size = local_size.value_or(1);
  if (coord.has_value()) c.coordinator = *coord;
  return c;
}

absl::StatusOr<collective::UcxCommunicatorConfig> RankConfigFromEnv() {
  return RankConfigFromEnv([](const char* name) { return std::getenv(name); });
}

}  // namespace zeroshard::train
