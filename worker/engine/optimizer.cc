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
    : spec_(spec), tensors_(layout.tensors) {
  m_.assign(layout.num_params(), 0.0f);
  v_.assign(layout.num_params(), 0.0f);
}

void LocalAdamW::Step(absl::Span<float> params, absl::Span<const float> grads,
                      float clip_coef, double lr) {
  ++t_;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const TensorInfo& t = tensors_[i];
    const AdamWHyper h = GroupAdamWHyper(spec_.param_groups(t.desc.param_group),
                                         lr, clip_coef, t_);
    const uint64_t at = t.range.begin;
    AdamWStep(h, params.data() + at, grads.data() + at, m_.data() + at,
              v_.data() + at, nullptr, ServingType::kNone, t.numel);
  }
}

}  // namespace zeroshard::engine
