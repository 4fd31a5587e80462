// Adam / AdamW: one fused multi-tensor pass through the adam_update kernel. The bias corrections
// are folded into two scalars per parameter (step size lr / (1 - beta1^t) and sqrt(1 - beta2^t)),
// computed in double, in the order PyTorch's single-tensor implementation uses, so the per-element
// arithmetic matches it.
#include "optim/adam.h"

#include <cmath>

#include "ops/optimizer_kernels.h"

namespace gpipe::optim {

Adam::Adam(std::vector<NamedTensor> params, AdamOptions options)
    : Adam("Adam", std::move(params), options, /*decoupled=*/false) {}

AdamW::AdamW(std::vector<NamedTensor> params, AdamOptions options)
    : Adam("AdamW", std::move(params), options, /*decoupled=*/true) {}

Adam::Adam(std::string name, std::vector<NamedTensor> params, AdamOptions options, bool decoupled)
    : Optimizer(std::move(name), std::move(params), options.lr),
      options_(options),
      decoupled_(decoupled) {
  const AdamOptions& o = options_;
  check_hyper(o.beta1 >= 0 && o.beta1 < 1, "beta1", "in [0, 1)", o.beta1);
  check_hyper(o.beta2 >= 0 && o.beta2 < 1, "beta2", "in [0, 1)", o.beta2);
  check_hyper(std::isfinite(o.eps) && o.eps > 0, "eps", "> 0", o.eps);
  check_hyper(std::isfinite(o.weight_decay) && o.weight_decay >= 0, "weight_decay", ">= 0",
              o.weight_decay);
  add_state_buffer("exp_avg");
  add_state_buffer("exp_avg_sq");
}

std::map<std::string, std::string> Adam::hyper_params() const {
  auto h = Optimizer::hyper_params();
  h["beta1"] = format_double(options_.beta1);
  h["beta2"] = format_double(options_.beta2);
  h["eps"] = format_double(options_.eps);
  h["weight_decay"] = format_double(options_.weight_decay);
  return h;
}

namespace {

// The per-parameter scalars of one update, computed in double.
ops::AdamStepArgs adam_args(const AdamOptions& o, double lr, int64_t step, bool decoupled) {
  const double t = static_cast<double>(step);
  ops::AdamStepArgs a;
  a.beta2 = o.beta2;
  a.one_minus_beta1 = 1.0 - o.beta1;
  a.one_minus_beta2 = 1.0 - o.beta2;
  a.eps = o.eps;
  a.weight_decay = o.weight_decay;
  a.shrink = 1.0 - lr * o.weight_decay;
  a.step_size = lr / (1.0 - std::pow(o.beta1, t));
  a.bc2_sqrt = std::sqrt(1.0 - std::pow(o.beta2, t));
  a.decay = o.weight_decay != 0;
  a.decoupled = decoupled;
  return a;
}

}  // namespace

void Adam::update(const Update& u) { update_all({u}); }

// One multi-tensor pass (Note [Multi-tensor updates] in optim/optimizer.h)
// through the adam_update kernel of the parameters' device.
void Adam::update_all(const std::vector<Update>& updates) {
  std::vector<ops::AdamStepArgs> args;
  for (const Update& u : updates) args.push_back(adam_args(options_, lr(), u.step, decoupled_));
  for_each_piece(updates, [&](size_t i, int64_t lo, int64_t hi) {
    const Update& u = updates[i];
    ops::adam_update(u.param.device(), args[i], u.param, u.grad, u.state[0], u.state[1], lo, hi);
  });
}

}  // namespace gpipe::optim
