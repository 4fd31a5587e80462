// Adam / AdamW: one fused pass per parameter. The bias corrections are
// folded into two scalars per parameter (step size lr / (1 - beta1^t) and
// sqrt(1 - beta2^t)), computed in double, in the order PyTorch's
// single-tensor implementation uses, so the per-element arithmetic matches it.
#include "optim/adam.h"

#include <cmath>

#include "core/parallel.h"
#include "optim/lerp.h"

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

void Adam::update(const Update& u) {
  const double lr = this->lr(), t = static_cast<double>(u.step);
  const double step_size = lr / (1.0 - std::pow(options_.beta1, t));
  const double bc2_sqrt = std::sqrt(1.0 - std::pow(options_.beta2, t));
  dispatch_floating(u.param.dtype(), name().c_str(), [&](auto zero) {
    using T = decltype(zero);
    T* p = u.param.data<T>();
    const T* g = u.grad.data<T>();
    T* m = u.state[0].data<T>();
    T* v = u.state[1].data<T>();
    const T b2 = static_cast<T>(options_.beta2);
    const T c1 = static_cast<T>(1.0 - options_.beta1), c2 = static_cast<T>(1.0 - options_.beta2);
    const T eps = static_cast<T>(options_.eps), wd = static_cast<T>(options_.weight_decay);
    const T shrink = static_cast<T>(1.0 - lr * options_.weight_decay);
    const T ss = static_cast<T>(step_size), bc2 = static_cast<T>(bc2_sqrt);
    const bool decay = options_.weight_decay != 0, decoupled = decoupled_;
    parallel_for(0, u.param.numel(), 1 << 14, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        T d = g[i];
        if (decay) {
          if (decoupled) {
            p[i] *= shrink;
          } else {
            d += wd * p[i];
          }
        }
        m[i] = lerp(m[i], d, c1);  // = beta1 * m + (1 - beta1) * d, PyTorch's rounding
        v[i] = b2 * v[i] + c2 * (d * d);
        const T denom = std::sqrt(v[i]) / bc2 + eps;
        p[i] -= ss * (m[i] / denom);
      }
    });
  });
}

}  // namespace gpipe::optim
