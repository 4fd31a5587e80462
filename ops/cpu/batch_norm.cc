// CPU kernels for batch normalisation over [N, C, S] (S = product of the
// trailing axes, 1 for [N, C]).
//
// Per-channel reductions run in parallel over channels and sum in double
// (float data in vectorised float blocks first, Note [Block sums]), in an
// order fixed by the shape (results do not depend on the thread count).
// Statistics take two passes (mean, then the mean squared deviation), which
// avoids the cancellation of E[x^2] - E[x]^2. For S > 1 each (sample, channel) plane is
// contiguous and is the inner loop; for S == 1 the inner loop runs across a
// block of channels of one row instead.
//
// Backward (training), with xhat = (x - mean) * invstd and m = N * S:
//   grad_gamma = sum(gy * xhat), grad_beta = sum(gy),
//   grad_x = gamma * invstd * (gy - grad_beta / m - xhat * grad_gamma / m),
// which is the affine map gx = a * gy + b * x + d with per-channel constants.
// In eval mode mean and var are constants and grad_x = gamma * invstd * gy.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/batch_norm_kernels.h"
#include "ops/cpu/isa/prelude.h"  // this file is built per ISA level: Note [CPU ISA kernels]

namespace gpipe::ops::cpu::GPIPE_ISA_NS {
namespace {

struct Layout {
  int64_t n, c, s;
  explicit Layout(const Tensor& x)
      : n(x.size(0)), c(x.size(1)), s(n * c == 0 ? 0 : x.numel() / (n * c)) {}
  int64_t count() const { return n * s; }
};

constexpr int64_t kRowBlock = 256;  // channels per task when S == 1

template <class T>
using ConstArray = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
template <class T>
using Array = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;

// Note [Block sums]. sum over i < n of term(i): for float, blocks of 256
// terms are summed in 16 float lanes (16 terms a lane, so the loop
// vectorises at any width) and the lanes added in double; the tail and
// double terms go straight into the double sum. The order depends on n
// only. A lane's 16-term float sum errs by at most 16 ulp of its size,
// against float32 data whose own rounding is 1/2 ulp; the cast-to-double
// sum it replaces ran one element per cycle at every ISA level.
template <class T, class F>
double block_sum(int64_t n, const F& term) {
  double acc = 0;
  int64_t i = 0;
  if constexpr (std::is_same_v<T, float>) {
    constexpr int64_t kLanes = 16, kBlock = 256;
    for (; i + kBlock <= n; i += kBlock) {
      float lanes[kLanes] = {};
      for (int64_t j = 0; j < kBlock; j += kLanes)
        for (int64_t l = 0; l < kLanes; ++l) lanes[l] += term(i + j + l);
      for (int64_t l = 0; l < kLanes; ++l) acc += static_cast<double>(lanes[l]);
    }
  }
  for (; i < n; ++i) acc += static_cast<double>(term(i));
  return acc;
}

// out[c] = the sum over channel c's elements of some term, in double.
//   plane(base, len, c): the sum over elements [base, base + len), all of channel c (S > 1);
//   row(base, lo, hi, out): adds element base + c into out[c] for c in [lo, hi) (S == 1).
// Both are Eigen expressions: -O2 does not auto-vectorise these loops, Eigen does.
template <class Plane, class Row>
void sum_channels(const Layout& l, const Plane& plane, const Row& row, double* out) {
  if (l.s == 1) {
    parallel_for(0, l.c, kRowBlock, [&](int64_t lo, int64_t hi) {
      std::fill(out + lo, out + hi, 0.0);
      for (int64_t n = 0; n < l.n; ++n) row(n * l.c, lo, hi, out);
    });
    return;
  }
  parallel_for(0, l.c, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      double acc = 0;
      for (int64_t n = 0; n < l.n; ++n) acc += plane((n * l.c + c) * l.s, l.s, c);
      out[c] = acc;
    }
  });
}

// out[i] = a[c] * u[i] + b[c] * v[i] + d[c] for channel c of element i
// (v may be null, then b is unused).
template <class T>
void affine_channels(const Layout& l, const T* u, const T* v, const vector<T>& a,
                     const vector<T>& b, const vector<T>& d, T* out) {
  if (l.s == 1) {
    const ConstArray<T> av(a.data(), l.c), bv(b.data(), l.c), dv(d.data(), l.c);
    parallel_for(0, l.n, std::max<int64_t>(1, 16384 / std::max<int64_t>(l.c, 1)),
                 [&](int64_t lo, int64_t hi) {
                   for (int64_t n = lo; n < hi; ++n) {
                     const int64_t base = n * l.c;
                     Array<T> o(out + base, l.c);
                     if (v)
                       o = av * ConstArray<T>(u + base, l.c) + bv * ConstArray<T>(v + base, l.c) +
                           dv;
                     else
                       o = av * ConstArray<T>(u + base, l.c) + dv;
                   }
                 });
    return;
  }
  parallel_for(0, l.n * l.c, std::max<int64_t>(1, 16384 / l.s), [&](int64_t lo, int64_t hi) {
    for (int64_t plane = lo; plane < hi; ++plane) {
      const int64_t c = plane % l.c, base = plane * l.s;
      Array<T> o(out + base, l.s);
      if (v)
        o = a[c] * ConstArray<T>(u + base, l.s) + b[c] * ConstArray<T>(v + base, l.s) + d[c];
      else
        o = a[c] * ConstArray<T>(u + base, l.s) + d[c];
    }
  });
}

void batch_norm_stats_cpu(const Tensor& x, Tensor& mean, Tensor& var) {
  const Layout l(x);
  dispatch_floating(x.dtype(), "batch_norm", [&](auto z) {
    using T = decltype(z);
    const T* xp = x.data<T>();
    vector<double> m(l.c), v(l.c);
    const double inv_count = l.count() > 0 ? 1.0 / static_cast<double>(l.count()) : 0.0;
    sum_channels(
        l,
        [&](int64_t base, int64_t len, int64_t) {
          const T* p = xp + base;
          return block_sum<T>(len, [p](int64_t i) { return p[i]; });
        },
        [&](int64_t base, int64_t lo, int64_t hi, double* out) {
          Array<double>(out + lo, hi - lo) +=
              ConstArray<T>(xp + base + lo, hi - lo).template cast<double>();
        },
        m.data());
    for (double& e : m) e *= inv_count;
    sum_channels(
        l,
        [&](int64_t base, int64_t len, int64_t c) {
          const T* p = xp + base;
          const T mc = static_cast<T>(m[c]);
          return block_sum<T>(len, [p, mc](int64_t i) { return (p[i] - mc) * (p[i] - mc); });
        },
        [&](int64_t base, int64_t lo, int64_t hi, double* out) {
          Array<double>(out + lo, hi - lo) +=
              (ConstArray<T>(xp + base + lo, hi - lo).template cast<double>() -
               ConstArray<double>(m.data() + lo, hi - lo))
                  .square();
        },
        v.data());
    T* mp = mean.data<T>();
    T* vp = var.data<T>();
    for (int64_t c = 0; c < l.c; ++c) {
      mp[c] = static_cast<T>(m[c]);
      vp[c] = static_cast<T>(v[c] * inv_count);
    }
  });
}

// Per-channel gamma * invstd (double precision).
template <class T>
vector<double> scales(const Tensor& var, const Tensor& gamma, double eps, int64_t c) {
  vector<double> s(c);
  const T* vp = var.data<T>();
  const T* gp = gamma.defined() ? gamma.data<T>() : nullptr;
  for (int64_t k = 0; k < c; ++k)
    s[k] = (gp ? static_cast<double>(gp[k]) : 1.0) / std::sqrt(static_cast<double>(vp[k]) + eps);
  return s;
}

void batch_norm_forward_cpu(const Tensor& x, const Tensor& mean, const Tensor& var,
                            const Tensor& gamma, const Tensor& beta, double eps, Tensor& y) {
  const Layout l(x);
  dispatch_floating(x.dtype(), "batch_norm", [&](auto z) {
    using T = decltype(z);
    const vector<double> s = scales<T>(var, gamma, eps, l.c);
    const T* mp = mean.data<T>();
    const T* bp = beta.defined() ? beta.data<T>() : nullptr;
    vector<T> a(l.c), unused(l.c), d(l.c);
    for (int64_t c = 0; c < l.c; ++c) {
      a[c] = static_cast<T>(s[c]);
      d[c] = static_cast<T>((bp ? static_cast<double>(bp[c]) : 0.0) -
                            static_cast<double>(mp[c]) * s[c]);
    }
    affine_channels<T>(l, x.data<T>(), nullptr, a, unused, d, y.data<T>());
  });
}

void batch_norm_backward_cpu(const Tensor& grad_y, const Tensor& x, const Tensor& mean,
                             const Tensor& var, const Tensor& gamma, double eps, bool training,
                             Tensor& grad_x, Tensor& grad_gamma, Tensor& grad_beta) {
  const Layout l(x);
  dispatch_floating(x.dtype(), "batch_norm backward", [&](auto z) {
    using T = decltype(z);
    const T* gy = grad_y.data<T>();
    const T* xp = x.data<T>();
    const T* mp = mean.data<T>();
    const T* vp = var.data<T>();
    vector<double> invstd(l.c);
    for (int64_t c = 0; c < l.c; ++c) invstd[c] = 1.0 / std::sqrt(static_cast<double>(vp[c]) + eps);

    // sum(gy) and sum(gy * xhat) per channel, only where something needs them.
    const bool need_sums = training && grad_x.defined();
    vector<double> sum_gy(l.c, 0.0), sum_gy_xhat(l.c, 0.0);
    if (need_sums || grad_beta.defined()) {
      sum_channels(
          l,
          [&](int64_t base, int64_t len, int64_t) {
            const T* g = gy + base;
            return block_sum<T>(len, [g](int64_t i) { return g[i]; });
          },
          [&](int64_t base, int64_t lo, int64_t hi, double* out) {
            Array<double>(out + lo, hi - lo) +=
                ConstArray<T>(gy + base + lo, hi - lo).template cast<double>();
          },
          sum_gy.data());
    }
    if (need_sums || grad_gamma.defined()) {
      vector<double> md(l.c);
      for (int64_t c = 0; c < l.c; ++c) md[c] = static_cast<double>(mp[c]);
      sum_channels(
          l,
          [&](int64_t base, int64_t len, int64_t c) {
            const T *g = gy + base, *p = xp + base;
            const T mc = mp[c];
            return block_sum<T>(len, [g, p, mc](int64_t i) { return g[i] * (p[i] - mc); });
          },
          [&](int64_t base, int64_t lo, int64_t hi, double* out) {
            Array<double>(out + lo, hi - lo) +=
                ConstArray<T>(gy + base + lo, hi - lo).template cast<double>() *
                (ConstArray<T>(xp + base + lo, hi - lo).template cast<double>() -
                 ConstArray<double>(md.data() + lo, hi - lo));
          },
          sum_gy_xhat.data());
      for (int64_t c = 0; c < l.c; ++c) sum_gy_xhat[c] *= invstd[c];
    }
    if (grad_beta.defined()) {
      T* gb = grad_beta.data<T>();
      for (int64_t c = 0; c < l.c; ++c) gb[c] = static_cast<T>(sum_gy[c]);
    }
    if (grad_gamma.defined()) {
      T* gg = grad_gamma.data<T>();
      for (int64_t c = 0; c < l.c; ++c) gg[c] = static_cast<T>(sum_gy_xhat[c]);
    }
    if (!grad_x.defined()) return;
    const vector<double> s = scales<T>(var, gamma, eps, l.c);
    vector<T> a(l.c), b(l.c, T(0)), d(l.c, T(0));
    const double inv_count = l.count() > 0 ? 1.0 / static_cast<double>(l.count()) : 0.0;
    for (int64_t c = 0; c < l.c; ++c) {
      a[c] = static_cast<T>(s[c]);
      if (training) {
        // gx = s*gy - s*sum_gy/m - s*invstd*(x - mean)*sum_gy_xhat/m
        const double bx = -s[c] * invstd[c] * sum_gy_xhat[c] * inv_count;
        b[c] = static_cast<T>(bx);
        d[c] = static_cast<T>(-s[c] * sum_gy[c] * inv_count - bx * static_cast<double>(mp[c]));
      }
    }
    affine_channels<T>(l, gy, training ? xp : nullptr, a, b, d, grad_x.data<T>());
  });
}

void batch_norm_update_running_stats_cpu(const Tensor& batch_mean, const Tensor& batch_var,
                                         double momentum, double unbias, Tensor& running_mean,
                                         Tensor& running_var) {
  dispatch_floating(running_mean.dtype(), "update_running_stats", [&](auto z) {
    using T = decltype(z);
    const T* bm = batch_mean.data<T>();
    const T* bv = batch_var.data<T>();
    T* rm = running_mean.data<T>();
    T* rv = running_var.data<T>();
    const double keep = 1.0 - momentum;
    for (int64_t c = 0; c < running_mean.numel(); ++c) {
      rm[c] = static_cast<T>(keep * rm[c] + momentum * bm[c]);
      rv[c] = static_cast<T>(keep * rv[c] + momentum * unbias * bv[c]);
    }
  });
}

}  // namespace

GPIPE_ISA_KERNEL(batch_norm_stats, batch_norm_stats_cpu);
GPIPE_ISA_KERNEL(batch_norm_forward, batch_norm_forward_cpu);
GPIPE_ISA_KERNEL(batch_norm_backward, batch_norm_backward_cpu);
GPIPE_ISA_KERNEL(batch_norm_update_running_stats, batch_norm_update_running_stats_cpu);

}  // namespace gpipe::ops::cpu::GPIPE_ISA_NS
