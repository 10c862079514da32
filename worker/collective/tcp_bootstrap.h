// TcpBootstrap: a one-shot TCP rendezvous. Rank 0 listens at the
// coordinator address (e.g. ZEROSHARD_COORD=host:port), the other ranks
// connect (retrying until rank 0 is up), send (rank, size, blob), and get
// back the table of all blobs; then every socket is closed.
//
// Errors (all name what is missing):
//   DEADLINE_EXCEEDED  rank 0: "ranks 2, 3 of 4 did not check in at
//                      host:port within 30s"; others: coordinator not
//                      reachable, or no table in time (a rank missing);
//                      a coordinator name that does not resolve within
//                      the timeout (retried: a Kubernetes pod's DNS name
//                      appears after the pod starts);
//   INVALID_ARGUMENT   bad address, duplicate rank, size mismatch;
//   UNAVAILABLE        the coordinator closed the connection (it failed).
//
// Threading: one thread uses an instance.
#ifndef ZEROSHARD_WORKER_COLLECTIVE_TCP_BOOTSTRAP_H_
#define ZEROSHARD_WORKER_COLLECTIVE_TCP_BOOTSTRAP_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/collective/bootstrap.h"

namespace zeroshard {
namespace collective {

struct TcpBootstrapOptions {
  int rank = 0;
  int size = 1;
  // "host:port". Rank 0 binds it (port 0: any free port, see port()).
  std::string coordinator;
  absl::Duration timeout = absl::Seconds(60);
};

class TcpBootstrap : public Bootstrap {
 public:
  // Rank 0 binds and listens here, so port() is known before AllGather.
  static absl::StatusOr<std::unique_ptr<TcpBootstrap>> Create(
      TcpBootstrapOptions options);
  ~TcpBootstrap() override;

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }
  // Rank 0: the port it listens on; others: the coordinator's port.
  int port() const { return port_; }

  absl::StatusOr<std::vector<std::string>> AllGather(
      const std::string& mine) override;

 private:
  explicit TcpBootstrap(TcpBootstrapOptions options)
      : options_(std::move(options)) {}
  absl::StatusOr<std::vector<std::string>> Serve(const std::string& mine);
  absl::StatusOr<std::vector<std::string>> Join(const std::string& mine);

  TcpBootstrapOptions options_;
  std::string host_;
  int port_ = 0;
  int listen_fd_ = -1;
};

}  // namespace collective
}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_COLLECTIVE_TCP_BOOTSTRAP_H_
