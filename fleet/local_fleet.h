// LocalFleet: starts K real zeroshard-server processes on loopback and
// waits until each answers health checks. Used by the launcher and by tests
// (the project's rule: tests that need a server start real servers).
//
// Each server listens on 127.0.0.1 on a port below the kernel's ephemeral
// range (common/quiet_port.h) and reports it through a file in `work_dir`;
// its output goes to work_dir/server-<k>.log unless `inherit_output` is
// set. Restart starts a server again on its port, which its clients know:
// a port from bind(port 0) would be in the ephemeral range, where another
// process's outgoing connection can take it while the server is down. A
// server that finds its port taken at start (another program bound it
// after the choice) is started again on another, up to 5 times.
// Destroying the fleet stops every server (SIGTERM, then SIGKILL after the
// grace period).
#ifndef ZEROSHARD_FLEET_LOCAL_FLEET_H_
#define ZEROSHARD_FLEET_LOCAL_FLEET_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/subprocess.h"
#include "grpcpp/security/credentials.h"

namespace zeroshard {

struct FleetOptions {
  std::string server_binary;  // path to zeroshard-server
  uint32_t num_shards = 1;
  std::string work_dir;                 // port files and logs
  std::vector<std::string> extra_args;  // passed to every server
  // The servers' security flags (server/auth/server_security.h); empty:
  // "--insecure" (plaintext, no tokens: loopback only).
  std::vector<std::string> security_args;
  // Credentials of the start-up health checks: null for plaintext; TLS
  // servers need ones that trust them.
  std::shared_ptr<grpc::ChannelCredentials> health_credentials;
  bool inherit_output = false;
  std::chrono::milliseconds start_timeout{30000};
  // Chooses each server's port; null: QuietPort(1). (Tests hand out a
  // taken port.)
  std::function<absl::StatusOr<int>()> choose_port;
};

class LocalFleet {
 public:
  static absl::StatusOr<std::unique_ptr<LocalFleet>> Start(
      const FleetOptions& options);
  ~LocalFleet();

  const std::vector<std::string>& addresses() const { return addresses_; }
  Subprocess& server(uint32_t k) { return servers_[k]; }
  // Kills server k (SIGKILL, wherever it is in its work) and starts it
  // again on the same port with the same flags; OK once it answers health
  // checks (INTERNAL naming the port if another process holds it now). Its
  // output goes to work_dir/server-<k>.restart-<n>.log. `graceful` > 0: SIGTERM
  // instead (the server finishes or abandons the step and writes its shutdown
  // snapshot), SIGKILL after that long; INTERNAL unless it exited 0.
  absl::Status Restart(uint32_t k, std::chrono::milliseconds graceful =
                                       std::chrono::milliseconds(0));
  // Stops every server; returns the first that did not exit 0 (as an
  // error naming it), else OK.
  absl::Status Stop(std::chrono::milliseconds grace);

 private:
  LocalFleet() = default;
  absl::StatusOr<Subprocess> Spawn(uint32_t k, int port,
                                   const std::string& port_file,
                                   const std::string& log) const;
  // Server k on a newly chosen port (its port file removed first).
  absl::StatusOr<Subprocess> SpawnOnNewPort(uint32_t k,
                                            const std::string& port_file,
                                            const std::string& log) const;
  // Until server k (at addresses_[k]) answers health checks; INTERNAL
  // naming `what` and `log` if it exits first.
  absl::Status WaitHealthy(uint32_t k,
                           std::chrono::steady_clock::time_point until,
                           const char* what, const std::string& log);
  FleetOptions options_;
  int restarts_ = 0;
  std::vector<Subprocess> servers_;
  std::vector<std::string> addresses_;
};

// Asks grpc.health.v1.Health/Check on `address`; OK when SERVING.
// `credentials`: null for plaintext.
absl::Status CheckHealth(
    const std::string& address, std::chrono::milliseconds deadline,
    std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr);

// The path of a binary of this workspace from a test or tool: tries
// $TEST_SRCDIR/zeroshard/<rel>, <rel> relative to the working directory,
// and the running executable's runfiles.
absl::StatusOr<std::string> WorkspaceBinary(const std::string& rel);

}  // namespace zeroshard

#endif  // ZEROSHARD_FLEET_LOCAL_FLEET_H_
