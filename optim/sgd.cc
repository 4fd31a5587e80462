// SGD: one fused multi-tensor pass (decay, momentum, Nesterov, update) through
// the sgd_update kernel, so each element is read and written once. Element updates are independent,
// so splitting the loop over threads does not change a bit of the result.
#include "optim/sgd.h"

#include <cmath>

#include "ops/optimizer_kernels.h"

namespace gpipe::optim {

Sgd::Sgd(std::vector<NamedTensor> params, SgdOptions options)
    : Optimizer("SGD", std::move(params), options.lr), options_(options) {
  const SgdOptions& o = options_;
  check_hyper(std::isfinite(o.momentum) && o.momentum >= 0, "momentum", ">= 0", o.momentum);
  check_hyper(std::isfinite(o.dampening) && o.dampening >= 0, "dampening", ">= 0", o.dampening);
  check_hyper(std::isfinite(o.weight_decay) && o.weight_decay >= 0, "weight_decay", ">= 0",
              o.weight_decay);
  if (o.nesterov) {
    check_hyper(o.momentum > 0, "momentum", "> 0 with nesterov", o.momentum);
    check_hyper(o.dampening == 0, "dampening", "0 with nesterov", o.dampening);
  }
  if (o.momentum != 0) add_state_buffer("momentum_buffer");
}

std::map<std::string, std::string> Sgd::hyper_params() const {
  auto h = Optimizer::hyper_params();
  h["momentum"] = format_double(options_.momentum);
  h["dampening"] = format_double(options_.dampening);
  h["weight_decay"] = format_double(options_.weight_decay);
  h["nesterov"] = options_.nesterov ? "true" : "false";
  return h;
}

void Sgd::update(const Update& u) { update_all({u}); }

// One multi-tensor pass (Note [Multi-tensor updates] in optim/optimizer.h)
// through the sgd_update kernel of the parameters' device.
void Sgd::update_all(const std::vector<Update>& updates) {
  Tensor none;
  for_each_piece(updates, "sgd_update", [&](size_t i, int64_t lo, int64_t hi) {
    const Update& u = updates[i];
    ops::SgdStepArgs a;
    a.lr = lr();
    a.weight_decay = options_.weight_decay;
    a.momentum = options_.momentum;
    a.keep = 1.0 - options_.dampening;
    a.first = u.step == 1;
    a.nesterov = options_.nesterov;
    ops::sgd_update(u.param.device(), a, u.param, u.grad,
                    options_.momentum != 0 ? u.state[0] : none, lo, hi);
  });
}

}  // namespace gpipe::optim
