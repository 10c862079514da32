// Bootstrap: how the ranks of a new group find each other. Every rank hands
// in a small blob (its transport address) and gets every rank's blob.
//
// Implementations: TcpBootstrap (tcp_bootstrap.h). Tests may fake it.
#ifndef ZEROSHARD_WORKER_COLLECTIVE_BOOTSTRAP_H_
#define ZEROSHARD_WORKER_COLLECTIVE_BOOTSTRAP_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace zeroshard {
namespace collective {

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Contributes `mine`; returns all blobs in rank order (entry rank() is
  // `mine`). Blocks; call once, from one thread.
  virtual absl::StatusOr<std::vector<std::string>> AllGather(
      const std::string& mine) = 0;
};

}  // namespace collective
}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_COLLECTIVE_BOOTSTRAP_H_
