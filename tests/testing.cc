#include "tests/testing.h"

#include <cstdlib>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/model_spec.h"
#include "common/optim/adamw.h"
#include "common/optim/adamw_hyper.h"
#include "gtest/gtest.h"

namespace zeroshard::testing {

v1::ModelSpec SmallSpec(const std::string& job, uint32_t num_servers, int scale,
                        uint32_t contributions) {
  v1::ModelSpec spec;
  spec.set_job_id(job);
  spec.set_num_servers(num_servers);
  spec.set_alignment(64);
  spec.set_serving_dtype(v1::DTYPE_BF16);
  spec.set_contributions_per_step(contributions);
  *spec.add_param_groups() = DefaultParamGroup(0.1);
  *spec.add_param_groups() = DefaultParamGroup(0.0);
  struct T {
    const char* name;
    std::vector<int64_t> shape;
    uint32_t group;
  };
  const std::vector<T> tensors = {
      {"wte", {97 * scale, 48}, 0},
      {"ln.w", {48}, 1},
      {"ln.b", {48}, 1},
      {"fc.w", {190 * scale, 48}, 0},
      {"fc.b", {190 * scale}, 1},
      {"tiny", {1}, 1},
      {"proj.w", {48, 190 * scale}, 0},
  };
  for (const T& t : tensors) {
    v1::TensorSpec* ts = spec.add_tensors();
    ts->set_name(t.name);
    for (int64_t d : t.shape) ts->add_shape(d);
    ts->set_param_group(t.group);
  }
  return spec;
}

std::unique_ptr<LocalFleet> StartFleet(uint32_t k,
                                       std::vector<std::string> extra,
                                       const std::string& work_dir) {
  auto binary = WorkspaceBinary("server/zeroshard-server");
  EXPECT_TRUE(binary.ok()) << binary.status();
  if (!binary.ok()) return nullptr;
  FleetOptions options;
  options.server_binary = *binary;
  options.num_shards = k;
  const char* tmp = std::getenv("TEST_TMPDIR");
  options.work_dir = !work_dir.empty() ? work_dir
                     : tmp != nullptr  ? tmp
                                       : "/tmp";
  options.extra_args = std::move(extra);
  auto fleet = LocalFleet::Start(options);
  EXPECT_TRUE(fleet.ok()) << fleet.status();
  if (!fleet.ok()) return nullptr;
  return std::move(*fleet);
}

std::unique_ptr<ShardClient> Connect(const LocalFleet& fleet) {
  ClientOptions options;
  options.addresses = fleet.addresses();
  options.deadline = std::chrono::milliseconds(20000);
  auto client = ShardClient::Connect(options);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? std::move(*client) : nullptr;
}

std::vector<float> RandomVector(std::mt19937_64& rng, size_t n, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

ReferenceAdamW::ReferenceAdamW(const v1::ModelSpec& spec,
                               std::vector<float> initial)
    : spec_(spec), p_(std::move(initial)) {
  auto plan = PlanForSpec(spec);
  EXPECT_TRUE(plan.ok()) << plan.status();
  plan_ = std::make_unique<PartitionPlan>(std::move(*plan));
  m_.assign(p_.size(), 0.0f);
  v_.assign(p_.size(), 0.0f);
}

void ReferenceAdamW::Step(const std::vector<float>& g, float clip_coef,
                          double lr) {
  ++t_;
  for (const TensorInfo& t : plan_->tensors()) {
    const v1::ParamGroup& group = spec_.param_groups(t.desc.param_group);
    const AdamWHyper h = GroupAdamWHyper(group, lr, clip_coef, t_);
    const uint64_t b = t.range.begin;
    std::vector<uint16_t> serve(t.numel);
    AdamWStepAt(SimdLevel::kScalar, h, p_.data() + b, g.data() + b,
                m_.data() + b, v_.data() + b, serve.data(), ServingType::kNone,
                t.numel);
  }
}

double ReferenceAdamW::SumSquares(const std::vector<float>& g) {
  double s = 0;
  for (float x : g) s += static_cast<double>(x) * x;
  return s;
}

int64_t FirstBitDifference(const std::vector<float>& a,
                           const std::vector<float>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], 4) != 0) return static_cast<int64_t>(i);
  }
  return -1;
}

}  // namespace zeroshard::testing
