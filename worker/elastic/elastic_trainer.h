// RunElastic: a training run whose worker group may shrink and grow while
// it runs, without restarting the job or resharding the servers' state.
//
// Every worker holds a lease on the job's membership service (shard 0,
// client/membership_client.h). A group is the members of one membership
// epoch, formed by a rendezvous through that service (world.h). The group
// trains with the ZeRO engine (worker/engine/engine.h, ElasticHooks) until
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
//     its data position from the last commit's trainer state;
//   - this worker is asked to stop (ElasticSpec::stop_requested, e.g. on
//     SIGTERM when Kubernetes scales the workers down): it Leaves the
//     membership at once (the epoch moves on), keeps training with its
//     group until the group ends at a step boundary (the leader reports
//     the newer epoch in that step's outcome, so every rank leaves there),
//     and returns with ElasticResult::left instead of forming the next
//     group. The survivors form it without this worker. The step in flight
//     either commits with this worker or is redone by the next group; a
//     leader, or a group of one, leaves the same way. Lease expiry is then
//     only for workers that crash.
// Permanent errors (error_class.h: bad data, a bad config, a model that
// does not match the servers) end the job instead: the worker that hits
// one leaves the membership with the error's text as the job's failure
// (MembershipClient::Leave(failure)) and returns the error; every other
// member sees the failure in its next membership answer (a heartbeat, the
// leader's step-boundary refresh, or the next group's formation), ends
// its group and returns FAILED_PRECONDITION with that text. Transient
// errors (a dead peer, an unreachable server, a newer epoch) re-form the
// group as above; so does any error of a group the membership had moved
// on from (this member expired, or the epoch changed meanwhile). The
// origin of a group's error (this worker's setup, a failed collective, or
// the servers and the engine) comes from watching the group's
// communicator (watched_communicator.h).
// A job that is done already (the servers' committed step, WorldView.step,
// is at least spec.steps) is not joined for nothing: RunElastic returns
// ElasticResult::already_done at once, also while it waits for workers.
// The leader refreshes the membership view (one Heartbeat RPC to shard 0)
// at every step boundary, so that it sees a Leave, a join or an expiry at
// the next boundary rather than at its next heartbeat (lease / 3).
// A server that restarted, or a commit that reached only some servers
// (the leader died mid-commit), rolls the job back to the newest
// checkpoint instead (engine.h recovery).
//
// Global batch: ElasticSpec::global_micro_batches micro-batches per step,
// split over the group by batch_policy.h (gradient accumulation; the
// data of a step does not depend on the group: trainer.h).
//
// Threading: call from one thread; the membership client's heartbeat
// thread runs meanwhile, and with stop_requested a helper thread that
// polls it every 20 ms (and calls Leave once it is true while a group
// trains).
// Errors: INVALID_ARGUMENT for a bad spec; the group formation's
// DEADLINE_EXCEEDED; a permanent error of this worker (the job failed);
// FAILED_PRECONDITION "the job failed: ..." when another member's did; the
// last error once max_failures groups in a row failed without committing
// a step. A worker that leaves returns OK
// (left), also when its last group failed (logged).
#ifndef ZEROSHARD_WORKER_ELASTIC_ELASTIC_TRAINER_H_
#define ZEROSHARD_WORKER_ELASTIC_ELASTIC_TRAINER_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/membership_client.h"
#include "client/shard_client.h"
#include "worker/collective/host_communicator.h"
#include "worker/collective/ucx_transport.h"
#include "worker/elastic/batch_policy.h"
#include "worker/train/trainer.h"

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
  // Their transport (world.h WorldOptions::transport).
  collective::UcxTransportOptions transport;
  // Groups in a row that may fail without committing a step.
  int max_failures = 5;
  // One line per group change (default: stdout). With stop_requested it is
  // also called from the helper thread (the leave), so it must be
  // thread-safe.
  std::function<void(const std::string&)> log;
  // Null, or whether this worker should leave the job (file comment); once
  // true it must stay true. Called from RunElastic's thread and its helper
  // thread, so it must be thread-safe and cheap (e.g. an atomic load set by
  // a signal-handling thread).
  std::function<bool()> stop_requested;
};

struct ElasticResult {
  // The steps this worker ran (RunElastic). params: the final parameters,
  // empty when this worker left before the run was done.
  train::TrainResult train;
  // Stopped on request before the run was done: the worker left the job.
  bool left = false;
  // The servers' step when the last group this worker trained in ended
  // (the steps committed), or -1 when it never trained (left); with
  // already_done the servers' step when this worker found the job done.
  int64_t last_step = -1;
  // The job had reached spec.steps already (the servers' step) when this
  // worker was about to form a group: nothing to do; train.params empty.
  bool already_done = false;
};

// INVALID_ARGUMENT naming the first bad field.
absl::Status ValidateElasticSpec(const ElasticSpec& spec);

// Runs spec.steps optimizer steps (from wherever the servers are) as
// member `member` (joined) of the job, or until elastic.stop_requested
// makes this worker leave (then `member` has left; result.left).
// progress->rank and world_size follow the groups. The result's params are
// the final ones; its losses and stats cover the steps this worker ran
// (TrainResult), steps run by groups without it left empty.
absl::StatusOr<ElasticResult> RunElastic(
    const train::TrainSpec& spec, const ElasticSpec& elastic,
    MembershipClient* member, ShardClient* client,
    const train::StepCallback& on_step = nullptr,
    train::TrainProgress* progress = nullptr);

}  // namespace zeroshard::elastic

#endif  // ZEROSHARD_WORKER_ELASTIC_ELASTIC_TRAINER_H_
