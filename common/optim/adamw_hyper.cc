#include "common/optim/adamw_hyper.h"

namespace zeroshard {

AdamWHyper GroupAdamWHyper(const v1::ParamGroup& group, double lr,
                           float grad_scale, int64_t step) {
  AdamWHyper h{};
  h.lr = lr * group.lr_scale();
  h.beta1 = group.beta1();
  h.beta2 = group.beta2();
  h.eps = group.eps();
  h.weight_decay = group.weight_decay();
  h.grad_scale = grad_scale;
  h.step = step;
  h.bias_correction = !group.no_bias_correction();
  return h;
}

}  // namespace zeroshard
