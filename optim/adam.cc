// Adam / AdamW: one fused multi-tensor pass through the adam_update kernel. The bias corrections
// are folded into two scalars per parameter (step size lr / (1 - beta1^t) and sqrt(1 - beta2^t)),
// computed in double, in the order PyTorch's single-tensor implementation uses, so the per-element
// arithmetic matches it.
#include "optim/adam.h"

#include <algorithm>
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
  // Devices with a multi-tensor kernel (CUDA): every parameter there in one call.
  std::vector<Update> rest;
  std::vector<ops::AdamStepArgs> rest_args;
  std::vector<Device> many;
  for (const Update& u : updates) {
    const Device d = u.param.device();
    if (!d.is_cpu() && ops::adam_update_many.has(d.type) &&
        std::find(many.begin(), many.end(), d) == many.end())
      many.push_back(d);
  }
  for (const Device& d : many) {
    std::vector<ops::AdamStepArgs> a;
    std::vector<Tensor> p, g, m, v;
    for (size_t i = 0; i < updates.size(); ++i) {
      const Update& u = updates[i];
      if (u.param.device() != d) continue;
      a.push_back(args[i]);
      p.push_back(u.param);
      g.push_back(u.grad.contiguous());
      m.push_back(u.state[0]);
      v.push_back(u.state[1]);
    }
    ops::adam_update_many(d, a, p, g, m, v);
    count_dispatch();
  }
  for (size_t i = 0; i < updates.size(); ++i)
    if (std::find(many.begin(), many.end(), updates[i].param.device()) == many.end()) {
      rest.push_back(updates[i]);
      rest_args.push_back(args[i]);
    }
  for_each_piece(rest, "adam_update", [&](size_t i, int64_t lo, int64_t hi) {
    const Update& u = rest[i];
    ops::adam_update(u.param.device(), rest_args[i], u.param, u.grad, u.state[0], u.state[1], lo,
                     hi);
  });
}

}  // namespace gpipe::optim
