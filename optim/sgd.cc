// SGD: one fused pass per parameter (decay, momentum, Nesterov, update), so
// each element is read and written once. Element updates are independent, so
// splitting the loop over threads does not change a bit of the result.
#include "optim/sgd.h"

#include <cmath>

#include "core/parallel.h"

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

void Sgd::update(const Update& u) {
  dispatch_floating(u.param.dtype(), "SGD", [&](auto zero) {
    using T = decltype(zero);
    T* p = u.param.data<T>();
    const T* g = u.grad.data<T>();
    T* buf = options_.momentum != 0 ? u.state[0].data<T>() : nullptr;
    const T lr = static_cast<T>(this->lr()), wd = static_cast<T>(options_.weight_decay);
    const T mom = static_cast<T>(options_.momentum);
    const T keep = static_cast<T>(1.0 - options_.dampening);
    const bool first = u.step == 1, nesterov = options_.nesterov, decay = wd != T(0);
    parallel_for(0, u.param.numel(), 1 << 14, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        T d = g[i];
        if (decay) d += wd * p[i];
        if (buf) {
          buf[i] = first ? d : mom * buf[i] + keep * d;
          d = nesterov ? d + mom * buf[i] : buf[i];
        }
        p[i] -= lr * d;
      }
    });
  });
}

}  // namespace gpipe::optim
