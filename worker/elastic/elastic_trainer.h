// RunElastic: a training run whose worker group may shrink and grow while
// it runs, without restarting the job or resharding the servers' state.
//
// Every worker holds a lease on the job's membership service (shard 0,
// client/membership_client.h). A group is the members of one membership
// epoch, formed by a rendezvous through that service (world.h). The group
// trains with the ZeRO engine (worker/zero/engine.h, ElasticHooks) until
//   - a member dies or leaves: the step in flight fails on every survivor
//     (a collective with the dead peer fails, or times out after
//     ElasticSpec::comm.op_timeout); its contributions are never applied
//     (the next group pushes with a newer epoch, which discards them);
//     once the dead member's lease expires the survivors form the next
//     group and continue from the servers' last commit;
//   - a worker joins: the leader sees the newer epoch at the end of a step
//     and every rank leaves the group at that step boundary; the next
//     group, the newcomer included, continues from that step. The
//     newcomer gathers the current parameters from the servers and gets
//     its data position from the last commit's trainer state.
// A server that restarted, or a commit that reached only some servers
// (the leader died mid-commit), rolls the job back to the newest
// checkpoint instead (engine.h recovery).
//
// Global batch: ElasticSpec::global_micro_batches micro-batches per step,
// split over the group by batch_policy.h (gradient accumulation; the
// data of a step does not depend on the group: trainer.h).
//
// Threading: call from one thread; the membership client's heartbeat
// thread runs meanwhile. Errors: INVALID_ARGUMENT for a bad spec; the
// group formation's DEADLINE_EXCEEDED; the last error once max_failures
// groups in a row failed without committing a step.
#ifndef ZEROSHARD_WORKER_ELASTIC_ELASTIC_TRAINER_H_
#define ZEROSHARD_WORKER_ELASTIC_ELASTIC_TRAINER_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/membership_client.h"
#include "client/shard_client.h"
#include "worker/collective/host_communicator.h"
#include "worker/elastic/batch_policy.h"
#include "worker/zero/trainer.h"

namespace zeroshard::elastic {

struct ElasticSpec {
  // The fewest workers a group trains with; the first group waits for
  // start_workers (0: min_workers). Every worker of a job must use the
  // same values.
  int min_workers = 1;
  int start_workers = 0;
  // Micro-batches per optimizer step over all workers; 0: start_workers ×
  // the spec's gradient_accumulation_steps.
  int global_micro_batches = 0;
  BatchPolicy policy = BatchPolicy::kRescale;
  // Longest wait for a group to form (or, under kRefuse, for a size that
  // divides the global batch).
  absl::Duration timeout = absl::Minutes(10);
  // Collective options of every group (op_timeout: how long a step waits
  // for a silent peer).
  collective::HostCommunicatorOptions comm;
  // Groups in a row that may fail without committing a step.
  int max_failures = 5;
  // One line per group change (default: stdout).
  std::function<void(const std::string&)> log;
};

// INVALID_ARGUMENT naming the first bad field.
absl::Status ValidateElasticSpec(const ElasticSpec& spec);

// Runs spec.steps optimizer steps (from wherever the servers are) as
// member `member` (joined) of the job. progress->rank and world_size
// follow the groups. The result's params are the final ones; its losses
// and stats cover the steps this worker ran (TrainResult), steps run by
// groups without it left empty.
absl::StatusOr<zero::TrainResult> RunElastic(
    const zero::TrainSpec& spec, const ElasticSpec& elastic,
    MembershipClient* member, ShardClient* client,
    const zero::StepCallback& on_step = nullptr,
    zero::TrainProgress* progress = nullptr);

}  // namespace zeroshard::elastic

#endif  // ZEROSHARD_WORKER_ELASTIC_ELASTIC_TRAINER_H_
