#include "worker/engine/optimizer.h"

#include "common/model_spec.h"
#include "common/optim/adamw_hyper.h"

namespace zeroshard::engine {

v1::ModelSpec ZeroModelSpec(const ModelLayout& layout,
                            const ZeroOptions& options, uint32_t num_servers,
                            uint32_t alignment) {
  v1::ModelSpec spec;
  spec.set_job_id(options.job_id);
  spec.set_num_servers(num_servers);
  spec.set_alignment(alignment);
  spec.set_serving_dtype(v1::DTYPE_BF16);
  spec.set_contributions_per_step(1);
  for (double wd : {options.weight_decay, 0.0}) {
    v1::ParamGroup* g = spec.add_param_groups();
    g->set_beta1(options.beta1);
    g->set_beta2(options.beta2);
    g->set_eps(options.eps);
    g->set_weight_decay(wd);
    g->set_lr_scale(1.0);
    g->set_no_bias_correction(!options.bias_correction);
  }
  for (const TensorDesc& t : layout.TensorDescs()) {
    v1::TensorSpec* ts = spec.add_tensors();
    ts->set_name(t.name);
    for (int64_t d : t.shape) ts->add_shape(d);
    ts->set_param_group(t.param_group);
  }
  return spec;
}

LocalAdamW::LocalAdamW(const v1::ModelSpec& spec, const ModelLayout& layout)
    : spec_(spec), tensors_(layout.tensors) {}

std::vector<TensorUpdate> LocalAdamW::Updates(float clip_coef, double lr) {
  ++t_;
  std::vector<TensorUpdate> out;
  out.reserve(tensors_.size());
  for (const TensorInfo& t : tensors_) {
    out.push_back(TensorUpdate{
        t.range, GroupAdamWHyper(spec_.param_groups(t.desc.param_group), lr,
                                 clip_coef, t_)});
  }
  return out;
}

void LocalAdamW::Step(absl::Span<float> params, absl::Span<const float> grads,
                      float clip_coef, double lr) {
  if (m_.size() != params.size()) {
    m_.assign(params.size(), 0.0f);
    v_.assign(params.size(), 0.0f);
  }
  for (const TensorUpdate& u : Updates(clip_coef, lr)) {
    const uint64_t at = u.range.begin;
    AdamWStep(u.hyper, params.data() + at, grads.data() + at, m_.data() + at,
              v_.data() + at, nullptr, ServingType::kNone, u.range.size());
  }
}

}  // namespace zeroshard::engine
