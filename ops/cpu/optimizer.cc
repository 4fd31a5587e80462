// The optimizers' element loops (ops/optimizer_kernels.h), compiled per ISA
// level. The scalars are copied to locals and the pointers are restrict, so
// the compiler knows the stores cannot change them and vectorises each loop;
// the variants (decay, momentum, centring) are chosen outside the loops.
#include <cmath>

#include "ops/cpu/isa/prelude.h"  // this file is built per ISA level: Note [CPU ISA kernels]
#include "ops/optimizer_kernels.h"

namespace gpipe::ops::cpu::GPIPE_ISA_NS {
namespace {

// lerp as PyTorch's CPU kernel rounds it, so moving averages written as
// torch.lerp_ in torch.optim round the same way here.
template <class T>
inline T lerp(T a, T b, T w) {
  return w < T(0.5) ? a + w * (b - a) : b - (b - a) * (T(1) - w);
}

template <int kDecay, class T>  // 0 none, 1 L2 (Adam), 2 decoupled (AdamW)
void adam_loop(const AdamStepArgs& s, T* __restrict p, const T* __restrict g, T* __restrict m,
               T* __restrict v, int64_t lo, int64_t hi) {
  const T b2 = static_cast<T>(s.beta2), c1 = static_cast<T>(s.one_minus_beta1),
          c2 = static_cast<T>(s.one_minus_beta2), eps = static_cast<T>(s.eps),
          wd = static_cast<T>(s.weight_decay), shrink = static_cast<T>(s.shrink),
          ss = static_cast<T>(s.step_size), bc2 = static_cast<T>(s.bc2_sqrt);
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

void adam_cpu(const AdamStepArgs& s, Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
              int64_t lo, int64_t hi) {
  dispatch_floating(param.dtype(), "Adam", [&](auto z) {
    using T = decltype(z);
    T* p = param.data<T>();
    const T* g = grad.data<T>();
    T* pm = m.data<T>();
    T* pv = v.data<T>();
    if (!s.decay)
      adam_loop<0>(s, p, g, pm, pv, lo, hi);
    else if (s.decoupled)
      adam_loop<2>(s, p, g, pm, pv, lo, hi);
    else
      adam_loop<1>(s, p, g, pm, pv, lo, hi);
  });
}

template <bool kDecay, int kMomentum, class T>  // momentum: 0 none, 1 plain, 2 Nesterov
void sgd_loop(const SgdStepArgs& s, T* __restrict p, const T* __restrict g, T* __restrict buf,
              int64_t lo, int64_t hi) {
  const T lr = static_cast<T>(s.lr), wd = static_cast<T>(s.weight_decay),
          mom = static_cast<T>(s.momentum), keep = static_cast<T>(s.keep);
  const bool first = s.first;
  for (int64_t i = lo; i < hi; ++i) {
    T d = g[i];
    if constexpr (kDecay) d += wd * p[i];
    if constexpr (kMomentum > 0) {
      buf[i] = first ? d : mom * buf[i] + keep * d;
      d = kMomentum == 2 ? d + mom * buf[i] : buf[i];
    }
    p[i] -= lr * d;
  }
}

template <bool kDecay, class T>
void sgd_variant(const SgdStepArgs& s, T* p, const T* g, T* buf, int64_t lo, int64_t hi) {
  if (!buf)
    sgd_loop<kDecay, 0>(s, p, g, buf, lo, hi);
  else if (s.nesterov)
    sgd_loop<kDecay, 2>(s, p, g, buf, lo, hi);
  else
    sgd_loop<kDecay, 1>(s, p, g, buf, lo, hi);
}

void sgd_cpu(const SgdStepArgs& s, Tensor& param, const Tensor& grad, Tensor& buffer, int64_t lo,
             int64_t hi) {
  dispatch_floating(param.dtype(), "SGD", [&](auto z) {
    using T = decltype(z);
    T* buf = buffer.defined() ? buffer.data<T>() : nullptr;
    if (s.weight_decay != 0)
      sgd_variant<true>(s, param.data<T>(), grad.data<T>(), buf, lo, hi);
    else
      sgd_variant<false>(s, param.data<T>(), grad.data<T>(), buf, lo, hi);
  });
}

template <bool kDecay, bool kCentered, bool kMomentum, class T>
void rmsprop_loop(const RmsPropStepArgs& s, T* __restrict p, const T* __restrict g,
                  T* __restrict sq, T* __restrict buf, T* __restrict ga, int64_t lo, int64_t hi) {
  const T lr = static_cast<T>(s.lr), wd = static_cast<T>(s.weight_decay),
          a = static_cast<T>(s.alpha), c = static_cast<T>(1.0 - s.alpha),
          eps = static_cast<T>(s.eps), mom = static_cast<T>(s.momentum);
  for (int64_t i = lo; i < hi; ++i) {
    T d = g[i];
    if constexpr (kDecay) d += wd * p[i];
    sq[i] = a * sq[i] + c * (d * d);
    T avg;
    if constexpr (kCentered) {
      ga[i] = lerp(ga[i], d, c);
      avg = std::sqrt(sq[i] - ga[i] * ga[i]) + eps;
    } else {
      avg = std::sqrt(sq[i]) + eps;
    }
    if constexpr (kMomentum) {
      buf[i] = mom * buf[i] + d / avg;
      p[i] -= lr * buf[i];
    } else {
      p[i] -= lr * (d / avg);
    }
  }
}

template <bool kDecay, bool kCentered, class T>
void rmsprop_momentum(const RmsPropStepArgs& s, T* p, const T* g, T* sq, T* buf, T* ga, int64_t lo,
                      int64_t hi) {
  if (buf)
    rmsprop_loop<kDecay, kCentered, true>(s, p, g, sq, buf, ga, lo, hi);
  else
    rmsprop_loop<kDecay, kCentered, false>(s, p, g, sq, buf, ga, lo, hi);
}

template <bool kDecay, class T>
void rmsprop_centered(const RmsPropStepArgs& s, T* p, const T* g, T* sq, T* buf, T* ga, int64_t lo,
                      int64_t hi) {
  if (ga)
    rmsprop_momentum<kDecay, true>(s, p, g, sq, buf, ga, lo, hi);
  else
    rmsprop_momentum<kDecay, false>(s, p, g, sq, buf, ga, lo, hi);
}

void rmsprop_cpu(const RmsPropStepArgs& s, Tensor& param, const Tensor& grad, Tensor& square_avg,
                 Tensor& buffer, Tensor& grad_avg, int64_t lo, int64_t hi) {
  dispatch_floating(param.dtype(), "RMSProp", [&](auto z) {
    using T = decltype(z);
    T* p = param.data<T>();
    const T* g = grad.data<T>();
    T* sq = square_avg.data<T>();
    T* buf = buffer.defined() ? buffer.data<T>() : nullptr;
    T* ga = grad_avg.defined() ? grad_avg.data<T>() : nullptr;
    if (s.weight_decay != 0)
      rmsprop_centered<true>(s, p, g, sq, buf, ga, lo, hi);
    else
      rmsprop_centered<false>(s, p, g, sq, buf, ga, lo, hi);
  });
}

}  // namespace

GPIPE_ISA_KERNEL(adam_update, adam_cpu);
GPIPE_ISA_KERNEL(sgd_update, sgd_cpu);
GPIPE_ISA_KERNEL(rmsprop_update, rmsprop_cpu);

}  // namespace gpipe::ops::cpu::GPIPE_ISA_NS
