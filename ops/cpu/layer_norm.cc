// Layer norm CPU kernels, one row (the last axis, contiguous) at a time.
//
// Forward: two passes over the row give the mean and then the biased
// variance as the mean of (x - mean)^2 (no cancellation for rows with a large
// offset), then y = (x - mean) * rstd * gamma + beta in one pass. Row
// reductions are sums in 16 fixed lanes (lane_sum: vectorised, as a plain
// loop would not be, and independent of the row's address).
// 16-bit rows (bfloat16, float16) are widened into float32 buffers one row
// at a time and their outputs rounded once: what the float32 kernel gives
// on widened copies, without the copies (dispatch_floating_with_params in
// ops/cpu/isa/rows.h).
// Backward, with xhat = (x - mean) * rstd and dxhat = g * gamma:
//   gx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
//   ggamma = sum_rows g * xhat,  gbeta = sum_rows g.
// The parameter gradients are reduced deterministically: the rows are cut
// into a number of chunks that depends only on the problem size (never on
// the thread count), each chunk accumulates its own partial sums while it
// also computes its rows of gx, and the partials are added in chunk order.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/isa/prelude.h"  // this file is built per ISA level: Note [CPU ISA kernels]
#include "ops/cpu/isa/rows.h"
#include "ops/layer_norm_kernels.h"

namespace gpipe::ops::cpu::GPIPE_ISA_NS {
namespace {

constexpr int64_t kGrainElems = 1 << 14;
constexpr int64_t kMaxChunks = 32;

template <class T>
const T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}
template <class T>
T* mutable_or_null(Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// Sum of p[0..n) (or of (p[i] - m)^2) in 16 lanes, lane i % 16, the lanes
// added in order at the end. The order depends only on n, never on the
// row's address (an Eigen sum starts its vectors at the first aligned
// element), so a row and its widened copy give the same bits; the fixed
// lanes still vectorise.
constexpr int kLanes = 16;

template <class T, bool kSquaredDeviation>
T lane_sum(const T* p, int64_t n, T m = T(0)) {
  T acc[kLanes] = {};
  const int64_t full = n / kLanes * kLanes;
  for (int64_t i = 0; i < full; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const T v = p[i + j] - m;
      acc[j] += kSquaredDeviation ? v * v : v;
    }
  }
  for (int64_t i = full; i < n; ++i) {
    const T v = p[i] - m;
    acc[i - full] += kSquaredDeviation ? v * v : v;
  }
  T total = 0;
  for (int j = 0; j < kLanes; ++j) total += acc[j];
  return total;
}

template <class T, class P>
void forward_rows(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, Tensor& y,
                  Tensor& mean, Tensor& rstd) {
  using C = compute_t<T>;
  const int64_t d = x.size(-1);
  const int64_t rows = x.numel() / d;
  vector<C> gamma_wide, beta_wide;  // gamma and beta in C, widened once if 16-bit
  const C* pg = gamma.defined() ? widen_row(gamma.data<P>(), d, gamma_wide) : nullptr;
  const C* pb = beta.defined() ? widen_row(beta.data<P>(), d, beta_wide) : nullptr;
  const T* px = x.data<T>();
  T* py = y.data<T>();
  C* pm = mean.data<C>();
  C* pr = rstd.data<C>();
  parallel_for(0, rows, std::max<int64_t>(1, kGrainElems / d), [&](int64_t lo, int64_t hi) {
    vector<C> x_wide, y_wide(is_16bit_v<T> ? d : 0);
    for (int64_t r = lo; r < hi; ++r) {
      const C* xr = widen_row(px + r * d, d, x_wide);
      C* yr = nullptr;
      if constexpr (is_16bit_v<T>)
        yr = y_wide.data();
      else
        yr = py + r * d;
      const C m = lane_sum<C, false>(xr, d) / static_cast<C>(d);
      const double var = static_cast<double>(lane_sum<C, true>(xr, d, m)) / d;
      const C rs = static_cast<C>(1.0 / std::sqrt(var + eps));
      pm[r] = m;
      pr[r] = rs;
      if (pg && pb) {
        for (int64_t i = 0; i < d; ++i) yr[i] = (xr[i] - m) * rs * pg[i] + pb[i];
      } else if (pg) {
        for (int64_t i = 0; i < d; ++i) yr[i] = (xr[i] - m) * rs * pg[i];
      } else if (pb) {
        for (int64_t i = 0; i < d; ++i) yr[i] = (xr[i] - m) * rs + pb[i];
      } else {
        for (int64_t i = 0; i < d; ++i) yr[i] = (xr[i] - m) * rs;
      }
      if constexpr (is_16bit_v<T>) narrow_row(yr, py + r * d, d);
    }
  });
}

void layer_norm_forward_cpu(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps,
                            Tensor& y, Tensor& mean, Tensor& rstd) {
  dispatch_floating_with_params(
      x, gamma.defined() ? gamma : beta, "layer_norm", [&](auto zt, auto zp) {
        forward_rows<decltype(zt), decltype(zp)>(x, gamma, beta, eps, y, mean, rstd);
      });
}

// gx for one row; dxhat is scratch of length d.
template <class T>
void row_input_grad(const T* gr, const T* xr, const T* gamma, T m, T rs, int64_t d, T* dxhat,
                    T* gxr) {
  ConstVec<T> g(gr, d), x(xr, d);
  Vec<T> dh(dxhat, d);
  if (gamma) {
    dh = g * ConstVec<T>(gamma, d);
  } else {
    dh = g;
  }
  // Sums in double, in kLanes fixed lanes as lane_sum (not Eigen
  // reductions, whose order follows the scratch's address): the lanes
  // vectorise where one running sum would wait on each add.
  double la[kLanes] = {}, lb[kLanes] = {};
  const int64_t full = d / kLanes * kLanes;
  for (int64_t i = 0; i < full; i += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      la[j] += dxhat[i + j];
      lb[j] += static_cast<double>(dxhat[i + j]) * (xr[i + j] - m);
    }
  for (int64_t i = full; i < d; ++i) {
    la[i - full] += dxhat[i];
    lb[i - full] += static_cast<double>(dxhat[i]) * (xr[i] - m);
  }
  double sa = 0, sb = 0;
  for (int j = 0; j < kLanes; ++j) {
    sa += la[j];
    sb += lb[j];
  }
  const T ma = static_cast<T>(sa / d);
  const T mb = static_cast<T>(sb * rs / d);
  Vec<T>(gxr, d) = rs * (dh - ma - (x - m) * (rs * mb));
}

template <class T, class P>
void backward_rows(const Tensor& g, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                   const Tensor& gamma, Tensor& gx, Tensor& ggamma, Tensor& gbeta) {
  using C = compute_t<T>;
  const int64_t d = x.size(-1);
  const int64_t rows = x.numel() / d;
  const T* pgy = g.data<T>();
  const T* px = x.data<T>();
  const C* pm = mean.data<C>();
  const C* pr = rstd.data<C>();
  vector<C> gamma_wide;
  const C* pgamma = gamma.defined() ? widen_row(gamma.data<P>(), d, gamma_wide) : nullptr;
  T* pgx = mutable_or_null<T>(gx);
  C* pgg = mutable_or_null<C>(ggamma);
  C* pgb = mutable_or_null<C>(gbeta);
  const bool params = pgg || pgb;
  if (rows == 0) {
    if (pgg) std::fill(pgg, pgg + d, C(0));
    if (pgb) std::fill(pgb, pgb + d, C(0));
    return;
  }

  // Fixed partition of the rows (see the file comment).
  const int64_t chunks = std::clamp<int64_t>((rows * d + kGrainElems - 1) / kGrainElems, 1,
                                             std::min(rows, kMaxChunks));
  vector<double> partial(params ? static_cast<size_t>(chunks * 2 * d) : 0, 0.0);
  parallel_for(0, chunks, 1, [&](int64_t clo, int64_t chi) {
    vector<C> scratch(pgx ? d : 0), g_wide, x_wide, gx_wide(pgx && is_16bit_v<T> ? d : 0);
    for (int64_t c = clo; c < chi; ++c) {
      const int64_t r0 = c * rows / chunks, r1 = (c + 1) * rows / chunks;
      double* sg = params ? partial.data() + c * 2 * d : nullptr;
      double* sb = params ? sg + d : nullptr;
      for (int64_t r = r0; r < r1; ++r) {
        const C* gr = widen_row(pgy + r * d, d, g_wide);
        const C* xr = widen_row(px + r * d, d, x_wide);
        const C m = pm[r], rs = pr[r];
        if (pgx) {
          if constexpr (is_16bit_v<T>) {
            row_input_grad(gr, xr, pgamma, m, rs, d, scratch.data(), gx_wide.data());
            narrow_row(gx_wide.data(), pgx + r * d, d);
          } else {
            row_input_grad(gr, xr, pgamma, m, rs, d, scratch.data(), pgx + r * d);
          }
        }
        if (params) {
          for (int64_t i = 0; i < d; ++i) {
            sg[i] += static_cast<double>(gr[i]) * ((xr[i] - m) * rs);
            sb[i] += gr[i];
          }
        }
      }
    }
  });
  if (!params) return;
  for (int64_t i = 0; i < d; ++i) {
    double sg = 0, sb = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      sg += partial[c * 2 * d + i];
      sb += partial[c * 2 * d + d + i];
    }
    if (pgg) pgg[i] = static_cast<C>(sg);
    if (pgb) pgb[i] = static_cast<C>(sb);
  }
}

void layer_norm_backward_cpu(const Tensor& g, const Tensor& x, const Tensor& mean,
                             const Tensor& rstd, const Tensor& gamma, Tensor& gx, Tensor& ggamma,
                             Tensor& gbeta) {
  dispatch_floating_with_params(x, gamma, "layer_norm backward", [&](auto zt, auto zp) {
    backward_rows<decltype(zt), decltype(zp)>(g, x, mean, rstd, gamma, gx, ggamma, gbeta);
  });
}

}  // namespace

GPIPE_ISA_KERNEL(layer_norm_forward, layer_norm_forward_cpu);
GPIPE_ISA_KERNEL(layer_norm_backward, layer_norm_backward_cpu);

}  // namespace gpipe::ops::cpu::GPIPE_ISA_NS
