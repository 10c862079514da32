// Waiting on collectives and server futures while recording what they moved
// and how long the caller was blocked (step_stats.h).
#ifndef ZEROSHARD_WORKER_ENGINE_OP_WAIT_H_
#define ZEROSHARD_WORKER_ENGINE_OP_WAIT_H_

#include <future>

#include "absl/status/status.h"
#include "worker/collective/collective.h"
#include "worker/engine/step_stats.h"

namespace zeroshard::engine {

// Waits for `op`; adds its bytes to `traffic` and the blocked time to
// `*wait_seconds`. Returns the op's status.
absl::Status WaitOp(const collective::CollectiveOp& op, Traffic* traffic,
                    double* wait_seconds);

// Waits for a server call's future (a default-constructed, invalid future
// counts as OK); adds the blocked time to `*wait_seconds`.
absl::Status WaitFuture(std::future<absl::Status>& f, double* wait_seconds);

// The same for a shared fetch: waits for `f` (invalid counts as OK), then
// leaves it invalid (waited for); adds the blocked time to `*wait_seconds`
// and, when not null, to `*phase_seconds` too.
absl::Status WaitShared(std::shared_future<absl::Status>& f,
                        double* wait_seconds, double* phase_seconds = nullptr);

// Seconds since an arbitrary fixed point (steady clock).
double NowSeconds();

}  // namespace zeroshard::engine

#endif  // ZEROSHARD_WORKER_ENGINE_OP_WAIT_H_
