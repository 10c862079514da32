#include "worker/engine/op_wait.h"

#include <chrono>

namespace zeroshard::engine {

double NowSeconds() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

absl::Status WaitOp(const collective::CollectiveOp& op, Traffic* traffic,
                    double* wait_seconds) {
  const double start = NowSeconds();
  absl::Status s = op.Wait();
  *wait_seconds += NowSeconds() - start;
  const collective::OpStats st = op.stats();
  traffic->Add(st.bytes_sent, st.bytes_received);
  return s;
}

absl::Status WaitFuture(std::future<absl::Status>& f, double* wait_seconds) {
  if (!f.valid()) return absl::OkStatus();
  const double start = NowSeconds();
  absl::Status s = f.get();
  *wait_seconds += NowSeconds() - start;
  return s;
}

absl::Status WaitShared(std::shared_future<absl::Status>& f,
                        double* wait_seconds, double* phase_seconds) {
  if (!f.valid()) return absl::OkStatus();
  const double start = NowSeconds();
  absl::Status s = f.get();
  f = std::shared_future<absl::Status>();
  const double waited = NowSeconds() - start;
  *wait_seconds += waited;
  if (phase_seconds != nullptr) *phase_seconds += waited;
  return s;
}

}  // namespace zeroshard::engine
