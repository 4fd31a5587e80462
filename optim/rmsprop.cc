// RMSProp: one fused pass per parameter over the squared average, the
// optional centred average and momentum buffer, and the parameter.
#include "optim/rmsprop.h"

#include <cmath>

#include "core/parallel.h"
#include "optim/lerp.h"

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

void RmsProp::update(const Update& u) {
  dispatch_floating(u.param.dtype(), "RMSProp", [&](auto zero) {
    using T = decltype(zero);
    const RmsPropOptions& o = options_;
    T* p = u.param.data<T>();
    const T* g = u.grad.data<T>();
    size_t next = 0;
    T* sq = u.state[next++].data<T>();
    T* buf = o.momentum > 0 ? u.state[next++].data<T>() : nullptr;
    T* ga = o.centered ? u.state[next++].data<T>() : nullptr;
    const T lr = static_cast<T>(this->lr()), wd = static_cast<T>(o.weight_decay);
    const T a = static_cast<T>(o.alpha), c = static_cast<T>(1.0 - o.alpha);
    const T eps = static_cast<T>(o.eps), mom = static_cast<T>(o.momentum);
    const bool decay = o.weight_decay != 0;
    parallel_for(0, u.param.numel(), 1 << 14, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        T d = g[i];
        if (decay) d += wd * p[i];
        sq[i] = a * sq[i] + c * (d * d);
        T avg;
        if (ga) {
          ga[i] = lerp(ga[i], d, c);
          avg = std::sqrt(sq[i] - ga[i] * ga[i]) + eps;
        } else {
          avg = std::sqrt(sq[i]) + eps;
        }
        if (buf) {
          buf[i] = mom * buf[i] + d / avg;
          p[i] -= lr * buf[i];
        } else {
          p[i] -= lr * (d / avg);
        }
      }
    });
  });
}

}  // namespace gpipe::optim
