#include "worker/quadratic.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/model_spec.h"

namespace zeroshard {

double QuadraticLoss(const float* p, uint64_t begin, uint64_t n,
                     uint64_t total) {
  double loss = 0;
  for (uint64_t e = 0; e < n; ++e) {
    const double d = p[e] - QuadraticTarget(begin + e);
    loss += 0.5 * d * d / total;
  }
  return loss;
}

v1::ModelSpec QuadraticSpec(const std::string& job_id, uint32_t num_servers,
                            uint64_t elements) {
  v1::ModelSpec spec;
  spec.set_job_id(job_id);
  spec.set_num_servers(num_servers);
  spec.set_alignment(64);
  spec.set_serving_dtype(v1::DTYPE_BF16);
  spec.set_contributions_per_step(1);
  *spec.add_param_groups() = DefaultParamGroup(0.0);
  spec.mutable_init()->set_seed(1);
  spec.mutable_init()->set_std(0.02);
  const uint64_t per = std::max<uint64_t>(1, elements / 4);
  for (int t = 0; t < 4; ++t) {
    v1::TensorSpec* ts = spec.add_tensors();
    ts->set_name(absl::StrCat("w", t));
    ts->add_shape(static_cast<int64_t>(per));
  }
  return spec;
}

}  // namespace zeroshard
