#include "common/optim/adamw_hyper.h"

namespace zeroshard {

AdamWHyper GroupAdamWHyper(const v1::ParamGroup& group, double lr,
                           float grad_scale, int64_t step) {
  AdamWHyper h{};
  h.lr = static_cast<float>(lr * group.lr_scale());
  h.beta1 = static_cast<float>(group.beta1());
  h.beta2 = static_cast<float>(group.beta2());
  h.eps = static_cast<float>(group.eps());
  h.weight_decay = static_cast<float>(group.weight_decay());
  h.grad_scale = grad_scale;
  h.step = step;
  return h;
}

}  // namespace zeroshard
