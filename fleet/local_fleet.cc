#include "fleet/local_fleet.h"

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/env/env.h"
#include "common/grpc_quirks.h"
#include "common/quiet_port.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "proto/health.grpc.pb.h"

namespace zeroshard {

absl::Status CheckHealth(
    const std::string& address, std::chrono::milliseconds deadline,
    std::shared_ptr<grpc::ChannelCredentials> credentials) {
  PrepareForGrpcClients();
  auto channel = grpc::CreateChannel(
      address, credentials != nullptr ? credentials
                                      : grpc::InsecureChannelCredentials());
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + deadline);
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status s = stub->Check(&ctx, req, &resp);
  if (!s.ok()) {
    return absl::UnavailableError(
        absl::StrCat(address, ": ", s.error_message()));
  }
  if (resp.status() != grpc::health::v1::HealthCheckResponse::SERVING) {
    return absl::UnavailableError(
        absl::StrCat(address, ": ",
                     grpc::health::v1::HealthCheckResponse::ServingStatus_Name(
                         resp.status())));
  }
  return absl::OkStatus();
}

namespace {

// Tries of a server whose chosen port was taken before it could bind.
constexpr int kPortTries = 5;

// The last line of the log at `path` ("" if none).
std::string LastLine(const std::string& path) {
  absl::StatusOr<std::string> log = ReadSmallFile(DefaultEnv(), path);
  if (!log.ok()) return "";
  std::vector<absl::string_view> lines =
      absl::StrSplit(absl::StripTrailingAsciiWhitespace(*log), '\n');
  return std::string(lines.back());
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalFleet>> LocalFleet::Start(
    const FleetOptions& options) {
  if (options.num_shards == 0) {
    return absl::InvalidArgumentError("a fleet needs at least one server");
  }
  auto fleet = std::unique_ptr<LocalFleet>(new LocalFleet());
  fleet->options_ = options;
  auto log_of = [&](uint32_t k) {
    return absl::StrCat(options.work_dir, "/server-", k, ".log");
  };
  auto port_file_of = [&](uint32_t k) {
    return absl::StrCat(options.work_dir, "/server-", k, ".port");
  };
  for (uint32_t k = 0; k < options.num_shards; ++k) {
    auto p = fleet->SpawnOnNewPort(k, port_file_of(k), log_of(k));
    if (!p.ok()) return p.status();
    fleet->servers_.push_back(std::move(*p));
  }
  const auto until = std::chrono::steady_clock::now() + options.start_timeout;
  for (uint32_t k = 0; k < options.num_shards; ++k) {
    int port = 0;
    int tries = 1;
    while (port == 0) {
      if (auto status = fleet->servers_[k].Poll()) {
        // Its last line is why (a flag, a locked or unwritable directory,
        // a port another program took since it was chosen).
        const std::string why = LastLine(log_of(k));
        if (absl::StrContains(why, "cannot listen on") && tries < kPortTries) {
          ++tries;
          ZS_ASSIGN_OR_RETURN(
              fleet->servers_[k],
              fleet->SpawnOnNewPort(k, port_file_of(k), log_of(k)));
          continue;
        }
        return absl::InternalError(
            absl::StrCat("shard server ", k, " exited during start (",
                         DescribeWaitStatus(*status), why.empty() ? "" : ": ",
                         why, "); see ", log_of(k)));
      }
      // 0 until the server has written the file (atomically).
      absl::StatusOr<std::string> text =
          ReadSmallFile(DefaultEnv(), port_file_of(k));
      if (!text.ok() ||
          !absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &port)) {
        port = 0;
      }
      if (port == 0) {
        if (std::chrono::steady_clock::now() > until) {
          return absl::DeadlineExceededError(
              absl::StrCat("shard server ", k, " did not start in time"));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
    fleet->addresses_.push_back(absl::StrCat("127.0.0.1:", port));
    ZS_RETURN_IF_ERROR(fleet->WaitHealthy(k, until, "start", log_of(k)));
  }
  return fleet;
}

absl::StatusOr<Subprocess> LocalFleet::SpawnOnNewPort(
    uint32_t k, const std::string& port_file, const std::string& log) const {
  ZS_ASSIGN_OR_RETURN(const int port, options_.choose_port != nullptr
                                          ? options_.choose_port()
                                          : QuietPort(1));
  (void)DefaultEnv()->RemoveFile(port_file);  // a previous run's or try's
  return Spawn(k, port, port_file, log);
}

absl::StatusOr<Subprocess> LocalFleet::Spawn(uint32_t k, int port,
                                             const std::string& port_file,
                                             const std::string& log) const {
  SpawnOptions spawn;
  spawn.argv = {options_.server_binary, "--host=127.0.0.1",
                absl::StrCat("--port=", port),
                absl::StrCat("--shard_index=", k),
                absl::StrCat("--num_shards=", options_.num_shards)};
  if (!port_file.empty()) {
    spawn.argv.push_back(absl::StrCat("--port_file=", port_file));
  }
  for (const std::string& a : options_.extra_args) spawn.argv.push_back(a);
  if (options_.security_args.empty()) spawn.argv.push_back("--insecure");
  for (const std::string& a : options_.security_args) spawn.argv.push_back(a);
  if (!options_.inherit_output) spawn.log_path = log;
  return Subprocess::Spawn(spawn);
}

absl::Status LocalFleet::Restart(uint32_t k,
                                 std::chrono::milliseconds graceful) {
  if (k >= servers_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("no shard server ", k));
  }
  if (graceful.count() > 0) {
    const int status = servers_[k].Stop(graceful);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      return absl::InternalError(
          absl::StrCat("shard server ", k, " did not stop cleanly on SIGTERM (",
                       DescribeWaitStatus(status), ")"));
    }
  } else {
    servers_[k].Signal(SIGKILL);
    servers_[k].Stop(std::chrono::milliseconds(0));
  }
  const int port =
      std::stoi(addresses_[k].substr(addresses_[k].rfind(':') + 1));
  ++restarts_;
  const std::string log = absl::StrCat(options_.work_dir, "/server-", k,
                                       ".restart-", restarts_, ".log");
  ZS_ASSIGN_OR_RETURN(servers_[k], Spawn(k, port, "", log));
  absl::Status s =
      WaitHealthy(k, std::chrono::steady_clock::now() + options_.start_timeout,
                  "restart", log);
  if (!s.ok() && absl::StrContains(LastLine(log), "cannot listen on")) {
    return absl::InternalError(absl::StrCat(
        "shard server ", k, " cannot listen on its port ", port,
        " again: another process holds it now (its clients know only that "
        "port); see ",
        log));
  }
  return s;
}

absl::Status LocalFleet::WaitHealthy(
    uint32_t k, std::chrono::steady_clock::time_point until, const char* what,
    const std::string& log) {
  while (true) {
    if (auto status = servers_[k].Poll()) {
      return absl::InternalError(
          absl::StrCat("shard server ", k, " exited during ", what, " (",
                       DescribeWaitStatus(*status), "); see ", log));
    }
    absl::Status health =
        CheckHealth(addresses_[k], std::chrono::milliseconds(1000),
                    options_.health_credentials);
    if (health.ok() || std::chrono::steady_clock::now() > until) return health;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

absl::Status LocalFleet::Stop(std::chrono::milliseconds grace) {
  absl::Status first = absl::OkStatus();
  for (auto& s : servers_) s.Signal(SIGTERM);
  for (size_t k = 0; k < servers_.size(); ++k) {
    const int status = servers_[k].Stop(grace);
    if (first.ok() && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      first = absl::InternalError(absl::StrCat(
          "shard server ", k, " ended with ", DescribeWaitStatus(status)));
    }
  }
  return first;
}

LocalFleet::~LocalFleet() {
  Stop(std::chrono::milliseconds(3000)).IgnoreError();
}

absl::StatusOr<std::string> WorkspaceBinary(const std::string& rel) {
  std::vector<std::string> candidates;
  if (const char* srcdir = std::getenv("TEST_SRCDIR")) {
    candidates.push_back(absl::StrCat(srcdir, "/zeroshard/", rel));
  }
  candidates.push_back(rel);
  const std::string self = SelfDirectory();
  // bazel-bin/<pkg>/<binary>.runfiles/zeroshard/<rel>
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n > 0) {
    candidates.push_back(
        absl::StrCat(std::string(buf, n), ".runfiles/zeroshard/", rel));
  }
  for (const std::string& c : candidates) {
    if (access(c.c_str(), X_OK) == 0) return c;
  }
  return absl::NotFoundError(
      absl::StrCat("cannot find ", rel, " (is it in the target's data?)"));
}

}  // namespace zeroshard
