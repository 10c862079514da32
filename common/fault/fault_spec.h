// Fault injection: the spec grammar, its parser, and the per-process
// decision maker (FaultInjector) that the gRPC interceptors
// (client/fault_interceptor.h, server/fault_interceptor.h) and the
// collective wrapper (worker/collective/faulty_communicator.h) consult.
//
// A spec is a comma-separated list of terms (spaces around terms ignored;
// the empty string means no faults):
//
//   seed=N              seed of the random decisions (default 1)
//   ACTION=P[:ARG]      every eligible call gets ACTION with probability P
//   ACTION_at=NAME#N[:ARG]
//                       the N-th call (from 1) of NAME in this process gets
//                       ACTION; may be repeated
//   only=NAME|NAME...   random faults only for these names (default: every
//                       RPC of the zeroshard.v1 services, no collective)
//
//   ACTION  drop   the RPC never reaches the server; the caller sees
//                  UNAVAILABLE (client side only)
//           fail   the RPC never reaches the server, or the collective
//                  operation fails, with status ARG (a code name such as
//                  INTERNAL, the default, or UNAVAILABLE)
//           lose   the RPC runs on the server but its answer is lost: the
//                  caller sees UNAVAILABLE (and retries)
//           dup    the server receives the RPC twice: unary calls are sent
//                  twice (the caller sees the second answer); for streams
//                  and on the server it acts as lose, so the client's retry
//                  (same idempotency key) is the second delivery
//           delay  held for ARG (a duration: 20ms, 1.5s, 500us) before it
//                  is sent (client), before its answer is sent (server), or
//                  before the collective operation is issued
//   NAME    an RPC method (PushGradients, Gather, CommitStep, ...) or a
//           collective operation (AllReduce, ReduceScatter, AllGather,
//           Broadcast, Barrier)
//
// Example: "seed=7,drop=0.05,dup=0.05,delay=0.05:20ms,lose_at=CommitStep#3".
// The probabilities of one spec must sum to at most 1: a call gets at most
// one random fault, drawn from a counter-based generator (seed, call index).
// Collectives cannot be dropped, lost or duplicated; a server cannot drop or
// fail a call before its handler runs (give those to the client).
#ifndef ZEROSHARD_COMMON_FAULT_FAULT_SPEC_H_
#define ZEROSHARD_COMMON_FAULT_FAULT_SPEC_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace zeroshard::fault {

enum class Action { kNone, kDrop, kFail, kLose, kDup, kDelay };
const char* ActionName(Action a);  // "drop", ...

// Where a spec is carried out; decides which actions and names are valid.
enum class Side {
  kServer,  // zeroshard-server: lose, dup, delay on RPCs
  kWorker,  // a worker: every action on RPCs; fail, delay on collectives
};

struct Fault {
  Action action = Action::kNone;
  absl::Duration delay;                           // kDelay
  absl::StatusCode code = absl::StatusCode::kOk;  // kFail
};

struct RandomFault {
  Fault fault;
  double probability = 0;
  std::string term;  // as written, for messages
};

struct PointFault {
  Fault fault;
  std::string name;  // RPC method or collective operation
  uint64_t nth = 0;  // 1-based call index of `name`
};

struct FaultSpec {
  uint64_t seed = 1;
  std::vector<RandomFault> random;
  std::vector<PointFault> points;
  std::vector<std::string> only;
  bool empty() const { return random.empty() && points.empty(); }
};

// Parses `text` (grammar above) for `side`. Errors are INVALID_ARGUMENT
// naming the bad term and what is wrong with it. Pure.
absl::StatusOr<FaultSpec> ParseFaultSpec(absl::string_view text, Side side);

// The spec of a binary: `flag` when not empty, else the environment
// variable `env_var` (ZEROSHARD_FAULTS on workers, ZEROSHARD_SERVER_FAULTS
// on servers), else no faults. Errors name the source.
absl::StatusOr<FaultSpec> FaultSpecFromFlagOrEnv(const std::string& flag,
                                                 const char* env_var,
                                                 Side side);

// True for the collective operation names (AllReduce, ...).
bool IsCollectiveName(absl::string_view name);

// One decision: the fault for one call, and why ("random" or the term).
struct Decision {
  Fault fault;
  std::string reason;
};

// Decides, per call, which fault (if any) a call gets, and counts what it
// injected. Thread-safe; one per process side (shared by every channel or
// by the server's interceptors).
class FaultInjector {
 public:
  explicit FaultInjector(FaultSpec spec);

  // The decision for the next call of `name` (an RPC method's short name
  // or a collective operation name). Point faults take precedence over
  // random ones.
  Decision Next(absl::string_view name);
  // The same for a call of the gRPC method `method`
  // ("/zeroshard.v1.ShardService/Gather": name Gather); no fault for
  // methods outside the zeroshard services (health checks, ...), which are
  // not counted.
  Decision NextRpc(const char* method);

  // How many calls were seen and faults of each action injected.
  struct Counts {
    uint64_t calls = 0, drop = 0, fail = 0, lose = 0, dup = 0, delay = 0;
  };
  Counts counts() const;
  // "fault injection: 1234 calls; drop 61, fail 0, lose 0, dup 58, delay 60"
  std::string Summary() const;
  const FaultSpec& spec() const { return spec_; }

 private:
  bool Eligible(absl::string_view name) const;

  const FaultSpec spec_;
  std::atomic<uint64_t> next_index_{0};
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, uint64_t> per_name_ ABSL_GUARDED_BY(mu_);
  Counts counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zeroshard::fault

#endif  // ZEROSHARD_COMMON_FAULT_FAULT_SPEC_H_
