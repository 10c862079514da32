// SkipMutexDeadlockChecks: turns off absl::Mutex's debug deadlock detector
// in a release binary.
//
// Abseil runs the detector unless it was compiled with NDEBUG, and the
// Debian packages this project builds against were not: every Lock taken
// while another is held updates a global lock graph (GraphCycles) and every
// Mutex destroyed removes its node, under one global lock. gRPC's locks are
// absl::Mutex too, so a shard server or worker moving data pays this on
// every RPC (0.6-0.7 % of all CPU in a stage-2 run on test hosts, measured
// with perf; docs/benchmarks.md).
//
// Opt-in: a main() calls it once, first thing, before starting threads
// (as TuneMallocForTransfers). Tests do not call it, so they keep the
// detector. Thread-safe (one atomic store).
#ifndef ZEROSHARD_COMMON_MUTEX_CHECKS_H_
#define ZEROSHARD_COMMON_MUTEX_CHECKS_H_

namespace zeroshard {

void SkipMutexDeadlockChecks();

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_MUTEX_CHECKS_H_
