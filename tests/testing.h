// Shared helpers for the cross-component tests in tests/: a small model
// spec, a fleet of real zeroshard-server processes, and a single-process
// AdamW reference over the whole flat space that uses the same arithmetic
// as the servers (the scalar kernel, which every SIMD path equals bit for
// bit).
#ifndef ZEROSHARD_TESTS_TESTING_H_
#define ZEROSHARD_TESTS_TESTING_H_

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "client/shard_client.h"
#include "common/partition.h"
#include "fleet/local_fleet.h"
#include "proto/zeroshard.pb.h"

namespace zeroshard::testing {

// Tensors of mixed sizes over two parameter groups (group 0 decays, group 1
// does not), sized so that server and worker boundaries fall inside
// tensors. `scale` multiplies the large dimensions.
v1::ModelSpec SmallSpec(const std::string& job, uint32_t num_servers,
                        int scale = 1, uint32_t contributions = 1);

// Starts `k` servers with logs under `work_dir` (empty: $TEST_TMPDIR, or
// /tmp; fleets running at once need their own). Fails the test (and
// returns nullptr) if they do not start.
std::unique_ptr<LocalFleet> StartFleet(uint32_t k,
                                       std::vector<std::string> extra = {},
                                       const std::string& work_dir = "");

// Connects a client to `fleet` (no registration).
std::unique_ptr<ShardClient> Connect(const LocalFleet& fleet);

std::vector<float> RandomVector(std::mt19937_64& rng, size_t n, float scale);

// Single-process AdamW over the flat space of `spec`.
class ReferenceAdamW {
 public:
  explicit ReferenceAdamW(const v1::ModelSpec& spec,
                          std::vector<float> initial);
  // g is the full (already reduced) gradient.
  void Step(const std::vector<float>& g, float clip_coef, double lr);
  const std::vector<float>& params() const { return p_; }
  // fp64 sum of squares of g (order differs from the servers': compare
  // within a tolerance).
  static double SumSquares(const std::vector<float>& g);

 private:
  v1::ModelSpec spec_;
  std::unique_ptr<PartitionPlan> plan_;
  std::vector<float> p_, m_, v_;
  int64_t t_ = 0;
};

// Index of the first element where a and b differ bitwise, or -1.
int64_t FirstBitDifference(const std::vector<float>& a,
                           const std::vector<float>& b);

}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_TESTING_H_
