#include "common/model_spec.h"

#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace zeroshard {
namespace {

constexpr uint32_t kMaxSlots = 1024;
constexpr uint32_t kMaxAlignment = 1 << 20;

bool Finite(double x) { return std::isfinite(x); }

}  // namespace

v1::ParamGroup DefaultParamGroup(double weight_decay) {
  v1::ParamGroup g;
  g.set_beta1(0.9);
  g.set_beta2(0.999);
  g.set_eps(1e-8);
  g.set_weight_decay(weight_decay);
  g.set_lr_scale(1.0);
  return g;
}

size_t DTypeSize(v1::DType dtype) {
  switch (dtype) {
    case v1::DTYPE_FP32:
      return 4;
    case v1::DTYPE_BF16:
    case v1::DTYPE_FP16:
      return 2;
    default:
      return 0;
  }
}

std::string DescribeSpecDifference(const v1::ModelSpec& a,
                                   const v1::ModelSpec& b) {
  auto diff = [](const std::string& field, const auto& x, const auto& y) {
    return absl::StrCat(field, ": ", x, " vs ", y);
  };
  if (a.job_id() != b.job_id()) return diff("job_id", a.job_id(), b.job_id());
  if (a.num_servers() != b.num_servers()) {
    return diff("num_servers", a.num_servers(), b.num_servers());
  }
  if (a.alignment() != b.alignment()) {
    return diff("alignment", a.alignment(), b.alignment());
  }
  if (a.serving_dtype() != b.serving_dtype()) {
    return diff("serving_dtype", v1::DType_Name(a.serving_dtype()),
                v1::DType_Name(b.serving_dtype()));
  }
  if (a.contributions_per_step() != b.contributions_per_step()) {
    return diff("contributions_per_step", a.contributions_per_step(),
                b.contributions_per_step());
  }
  if (a.tensors_size() != b.tensors_size()) {
    return diff("number of tensors", a.tensors_size(), b.tensors_size());
  }
  for (int i = 0; i < a.tensors_size(); ++i) {
    const v1::TensorSpec& x = a.tensors(i);
    const v1::TensorSpec& y = b.tensors(i);
    const std::string f = absl::StrCat("tensors[", i, "]");
    if (x.name() != y.name()) return diff(f + ".name", x.name(), y.name());
    const std::string xs = absl::StrJoin(x.shape(), "x");
    const std::string ys = absl::StrJoin(y.shape(), "x");
    if (xs != ys) return diff(f + " ('" + x.name() + "') shape", xs, ys);
    if (x.param_group() != y.param_group()) {
      return diff(f + " ('" + x.name() + "') param_group", x.param_group(),
                  y.param_group());
    }
  }
  if (a.param_groups_size() != b.param_groups_size()) {
    return diff("number of param_groups", a.param_groups_size(),
                b.param_groups_size());
  }
  for (int i = 0; i < a.param_groups_size(); ++i) {
    const v1::ParamGroup& x = a.param_groups(i);
    const v1::ParamGroup& y = b.param_groups(i);
    const std::string f = absl::StrCat("param_groups[", i, "].");
    if (x.beta1() != y.beta1()) return diff(f + "beta1", x.beta1(), y.beta1());
    if (x.beta2() != y.beta2()) return diff(f + "beta2", x.beta2(), y.beta2());
    if (x.eps() != y.eps()) return diff(f + "eps", x.eps(), y.eps());
    if (x.weight_decay() != y.weight_decay()) {
      return diff(f + "weight_decay", x.weight_decay(), y.weight_decay());
    }
    if (x.lr_scale() != y.lr_scale()) {
      return diff(f + "lr_scale", x.lr_scale(), y.lr_scale());
    }
    if (x.no_bias_correction() != y.no_bias_correction()) {
      return diff(f + "no_bias_correction", int{x.no_bias_correction()},
                  int{y.no_bias_correction()});
    }
  }
  if (a.init().seed() != b.init().seed()) {
    return diff("init.seed", a.init().seed(), b.init().seed());
  }
  if (a.init().std() != b.init().std()) {
    return diff("init.std", a.init().std(), b.init().std());
  }
  return "";
}

absl::Status ValidateSpec(const v1::ModelSpec& spec) {
  auto bad = [](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat("ModelSpec.", parts...));
  };
  if (spec.job_id().empty()) return bad("job_id is empty");
  if (spec.job_id().size() > 128) return bad("job_id is over 128 bytes");
  if (spec.num_servers() == 0) return bad("num_servers must be >= 1");
  if (spec.alignment() == 0 || spec.alignment() > kMaxAlignment) {
    return bad("alignment ", spec.alignment(), " is not in [1, ", kMaxAlignment,
               "]");
  }
  if (spec.serving_dtype() != v1::DTYPE_BF16 &&
      spec.serving_dtype() != v1::DTYPE_FP16) {
    return bad("serving_dtype must be DTYPE_BF16 or DTYPE_FP16");
  }
  if (spec.contributions_per_step() == 0 ||
      spec.contributions_per_step() > kMaxSlots) {
    return bad("contributions_per_step ", spec.contributions_per_step(),
               " is not in [1, ", kMaxSlots, "]");
  }
  if (spec.param_groups_size() == 0) return bad("param_groups is empty");
  for (int i = 0; i < spec.param_groups_size(); ++i) {
    const v1::ParamGroup& g = spec.param_groups(i);
    const std::string f = absl::StrCat("param_groups[", i, "].");
    if (!(g.beta1() >= 0 && g.beta1() < 1))
      return bad(f, "beta1 not in [0, 1)");
    if (!(g.beta2() >= 0 && g.beta2() < 1))
      return bad(f, "beta2 not in [0, 1)");
    if (!(g.eps() > 0 && Finite(g.eps()))) return bad(f, "eps must be > 0");
    if (!(g.weight_decay() >= 0 && Finite(g.weight_decay()))) {
      return bad(f, "weight_decay must be >= 0");
    }
    if (!(g.lr_scale() > 0 && Finite(g.lr_scale()))) {
      return bad(f, "lr_scale must be > 0");
    }
  }
  for (int i = 0; i < spec.tensors_size(); ++i) {
    if (spec.tensors(i).param_group() >=
        static_cast<uint32_t>(spec.param_groups_size())) {
      return bad("tensors[", i, "] ('", spec.tensors(i).name(),
                 "') names param_group ", spec.tensors(i).param_group(), " of ",
                 spec.param_groups_size());
    }
  }
  if (!(spec.init().std() >= 0 && Finite(spec.init().std()))) {
    return bad("init.std must be >= 0");
  }
  return PlanForSpec(spec).status();
}

absl::StatusOr<PartitionPlan> PlanForSpec(const v1::ModelSpec& spec) {
  std::vector<TensorDesc> tensors;
  tensors.reserve(spec.tensors_size());
  for (const v1::TensorSpec& t : spec.tensors()) {
    tensors.push_back(TensorDesc{
        t.name(), std::vector<int64_t>(t.shape().begin(), t.shape().end()),
        t.param_group()});
  }
  return PartitionPlan::Create(std::move(tensors), spec.num_servers(),
                               spec.alignment());
}

}  // namespace zeroshard
