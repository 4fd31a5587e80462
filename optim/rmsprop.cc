// RMSProp: one fused multi-tensor pass (rmsprop_update kernel) over the
// squared average, the optional centred average and momentum buffer, and the
// parameter.
#include "optim/rmsprop.h"

#include <cmath>

#include "ops/optimizer_kernels.h"

namespace gpipe::optim {

RmsProp::RmsProp(std::vector<NamedTensor> params, RmsPropOptions options)
    : Optimizer("RMSProp", std::move(params), options.lr), options_(options) {
  const RmsPropOptions& o = options_;
  check_hyper(o.alpha >= 0 && o.alpha < 1, "alpha", "in [0, 1)", o.alpha);
  check_hyper(std::isfinite(o.eps) && o.eps > 0, "eps", "> 0", o.eps);
  check_hyper(std::isfinite(o.momentum) && o.momentum >= 0, "momentum", ">= 0", o.momentum);
  check_hyper(std::isfinite(o.weight_decay) && o.weight_decay >= 0, "weight_decay", ">= 0",
              o.weight_decay);
  add_state_buffer("square_avg");
  if (o.momentum > 0) add_state_buffer("momentum_buffer");
  if (o.centered) add_state_buffer("grad_avg");
}

std::map<std::string, std::string> RmsProp::hyper_params() const {
  auto h = Optimizer::hyper_params();
  h["alpha"] = format_double(options_.alpha);
  h["eps"] = format_double(options_.eps);
  h["momentum"] = format_double(options_.momentum);
  h["weight_decay"] = format_double(options_.weight_decay);
  h["centered"] = options_.centered ? "true" : "false";
  return h;
}

void RmsProp::update(const Update& u) { update_all({u}); }

// One multi-tensor pass (Note [Multi-tensor updates] in optim/optimizer.h)
// through the rmsprop_update kernel of the parameters' device.
void RmsProp::update_all(const std::vector<Update>& updates) {
  const RmsPropOptions& o = options_;
  ops::RmsPropStepArgs a;
  a.lr = lr();
  a.weight_decay = o.weight_decay;
  a.alpha = o.alpha;
  a.eps = o.eps;
  a.momentum = o.momentum;
  Tensor none;
  for_each_piece(updates, "rmsprop_update", [&](size_t i, int64_t lo, int64_t hi) {
    const Update& u = updates[i];
    size_t next = 1;  // state: square_avg, then momentum_buffer and grad_avg if kept
    Tensor& buf = o.momentum > 0 ? u.state[next++] : none;
    Tensor& ga = o.centered ? u.state[next++] : none;
    ops::rmsprop_update(u.param.device(), a, u.param, u.grad, u.state[0], buf, ga, lo, hi);
  });
}

}  // namespace gpipe::optim
