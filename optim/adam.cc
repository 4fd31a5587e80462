// Adam / AdamW: one fused pass per parameter. The bias corrections are
// folded into two scalars per parameter (step size lr / (1 - beta1^t) and
// sqrt(1 - beta2^t)), computed in double, in the order PyTorch's
// single-tensor implementation uses, so the per-element arithmetic matches it.
#include "optim/adam.h"

#include <algorithm>
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

namespace {

// The per-parameter scalars of one update, and the element loop both the
// single-tensor and the multi-tensor paths run (so they agree bit for bit).
template <class T>
struct AdamScalars {
  T b2, c1, c2, eps, wd, shrink, ss, bc2;
  bool decay, decoupled;
};

template <class T>
AdamScalars<T> adam_scalars(const AdamOptions& o, double lr, int64_t step, bool decoupled) {
  const double t = static_cast<double>(step);
  const double step_size = lr / (1.0 - std::pow(o.beta1, t));
  const double bc2_sqrt = std::sqrt(1.0 - std::pow(o.beta2, t));
  return {static_cast<T>(o.beta2),
          static_cast<T>(1.0 - o.beta1),
          static_cast<T>(1.0 - o.beta2),
          static_cast<T>(o.eps),
          static_cast<T>(o.weight_decay),
          static_cast<T>(1.0 - lr * o.weight_decay),
          static_cast<T>(step_size),
          static_cast<T>(bc2_sqrt),
          o.weight_decay != 0,
          decoupled};
}

// The scalars are copied to locals and the pointers are restrict, so the
// compiler knows the stores cannot change them and vectorises the loop; the
// weight-decay variant is chosen outside it.
template <int kDecay, class T>  // 0 none, 1 L2 (Adam), 2 decoupled (AdamW)
void adam_loop(const AdamScalars<T>& k, T* __restrict p, const T* __restrict g, T* __restrict m,
               T* __restrict v, int64_t lo, int64_t hi) {
  const T b2 = k.b2, c1 = k.c1, c2 = k.c2, eps = k.eps, wd = k.wd, shrink = k.shrink, ss = k.ss,
          bc2 = k.bc2;
  for (int64_t i = lo; i < hi; ++i) {
    T d = g[i];
    if constexpr (kDecay == 2) p[i] *= shrink;
    if constexpr (kDecay == 1) d += wd * p[i];
    m[i] = lerp(m[i], d, c1);  // = beta1 * m + (1 - beta1) * d, PyTorch's rounding
    v[i] = b2 * v[i] + c2 * (d * d);
    const T denom = std::sqrt(v[i]) / bc2 + eps;
    p[i] -= ss * (m[i] / denom);
  }
}

template <class T>
void adam_elements(const AdamScalars<T>& k, T* p, const T* g, T* m, T* v, int64_t lo, int64_t hi) {
  if (!k.decay)
    adam_loop<0>(k, p, g, m, v, lo, hi);
  else if (k.decoupled)
    adam_loop<2>(k, p, g, m, v, lo, hi);
  else
    adam_loop<1>(k, p, g, m, v, lo, hi);
}

constexpr int64_t kGrain = 1 << 14;

}  // namespace

void Adam::update(const Update& u) {
  dispatch_floating(u.param.dtype(), name().c_str(), [&](auto zero) {
    using T = decltype(zero);
    const AdamScalars<T> k = adam_scalars<T>(options_, lr(), u.step, decoupled_);
    T* p = u.param.data<T>();
    const T* g = u.grad.data<T>();
    T* m = u.state[0].data<T>();
    T* v = u.state[1].data<T>();
    parallel_for(0, u.param.numel(), kGrain,
                 [&](int64_t lo, int64_t hi) { adam_elements(k, p, g, m, v, lo, hi); });
  });
}

// Note [Multi-tensor Adam]. A model has many small tensors (biases, norms):
// one parallel_for each would run most of them on one thread and pay a
// dispatch per tensor. Instead the float32 CPU parameters are laid end to end
// as one range of elements, cut into chunks of kGrain across the intra-op
// pool, and each chunk updates the pieces of the tensors it covers. Each
// element sees exactly the arithmetic of update(), so the result is the
// same bit for bit. Other parameters (float64, other devices) take update().
void Adam::update_all(const std::vector<Update>& updates) {
  std::vector<const Update*> fused;
  std::vector<AdamScalars<float>> scalars;
  std::vector<int64_t> offset{0};  // element offset of each fused tensor in the joint range
  for (const Update& u : updates) {
    if (u.param.dtype() == DType::kFloat32 && u.param.device().is_cpu()) {
      fused.push_back(&u);
      scalars.push_back(adam_scalars<float>(options_, lr(), u.step, decoupled_));
      offset.push_back(offset.back() + u.param.numel());
    } else {
      update(u);
    }
  }
  if (fused.empty()) return;
  parallel_for(0, offset.back(), kGrain, [&](int64_t lo, int64_t hi) {
    size_t t = std::upper_bound(offset.begin(), offset.end(), lo) - offset.begin() - 1;
    for (; t < fused.size() && offset[t] < hi; ++t) {
      const Update& u = *fused[t];
      const int64_t a = std::max(lo, offset[t]) - offset[t],
                    b = std::min(hi, offset[t + 1]) - offset[t];
      adam_elements(scalars[t], u.param.data<float>(), u.grad.data<float>(),
                    u.state[0].data<float>(), u.state[1].data<float>(), a, b);
    }
  });
}

}  // namespace gpipe::optim
