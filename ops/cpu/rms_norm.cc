// RMS norm CPU kernels, one row (the last axis, contiguous) at a time, the
// layer norm kernels' structure (ops/cpu/layer_norm.cc) without the mean:
//
//   forward:  rstd = 1 / sqrt(mean(x^2) + eps), y = x * rstd * w
//   backward: xhat = x * rstd, dxhat = g * w,
//             gx = rstd * (dxhat - xhat * mean(dxhat * xhat)),
//             gw = sum over rows of g * xhat.
//
// The row sums run in 16 fixed lanes in double, so they do not depend on
// the row's address or the ISA level's width; the weight's gradient is
// reduced over a fixed partition of the rows (by the problem's size, never
// the thread count) and the partials added in order. 16-bit rows are
// widened into float32 buffers a row at a time and each output rounded once
// (Note [16-bit kernels] in ops/dispatch.h).
#include <algorithm>
#include <cmath>

#include "ops/cpu/isa/prelude.h"  // this file is built per ISA level: Note [CPU ISA kernels]
#include "ops/cpu/isa/rows.h"
#include "ops/rms_norm_kernels.h"

namespace gpipe::ops::cpu::GPIPE_ISA_NS {
namespace {

constexpr int64_t kGrainElems = 1 << 14;
constexpr int64_t kMaxChunks = 32;
constexpr int kLanes = 16;

// Sum over i of a[i] * b[i], in kLanes double lanes added in order.
template <class C>
double lane_dot(const C* a, const C* b, int64_t n) {
  double acc[kLanes] = {};
  const int64_t full = n / kLanes * kLanes;
  for (int64_t i = 0; i < full; i += kLanes)
    for (int j = 0; j < kLanes; ++j)
      acc[j] += static_cast<double>(a[i + j]) * static_cast<double>(b[i + j]);
  for (int64_t i = full; i < n; ++i)
    acc[i - full] += static_cast<double>(a[i]) * static_cast<double>(b[i]);
  double total = 0;
  for (int j = 0; j < kLanes; ++j) total += acc[j];
  return total;
}

template <class T, class P>
void forward_rows(const Tensor& x, const Tensor& weight, double eps, Tensor& y, Tensor& rstd) {
  using C = compute_t<T>;
  const int64_t d = x.size(-1), rows = x.numel() / d;
  vector<C> w_wide;
  const C* pw = weight.defined() ? widen_row(weight.data<P>(), d, w_wide) : nullptr;
  const T* px = x.data<T>();
  T* py = y.data<T>();
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
      const C rs = static_cast<C>(1.0 / std::sqrt(lane_dot(xr, xr, d) / d + eps));
      pr[r] = rs;
      if (pw) {
        for (int64_t i = 0; i < d; ++i) yr[i] = xr[i] * rs * pw[i];
      } else {
        for (int64_t i = 0; i < d; ++i) yr[i] = xr[i] * rs;
      }
      if constexpr (is_16bit_v<T>) narrow_row(yr, py + r * d, d);
    }
  });
}

void rms_norm_forward_cpu(const Tensor& x, const Tensor& weight, double eps, Tensor& y,
                          Tensor& rstd) {
  dispatch_floating_with_params(x, weight, "rms_norm", [&](auto zt, auto zp) {
    forward_rows<decltype(zt), decltype(zp)>(x, weight, eps, y, rstd);
  });
}

template <class T, class P>
void backward_rows(const Tensor& g, const Tensor& x, const Tensor& rstd, const Tensor& weight,
                   Tensor& gx, Tensor& gweight) {
  using C = compute_t<T>;
  const int64_t d = x.size(-1), rows = x.numel() / d;
  const T* pg = g.data<T>();
  const T* px = x.data<T>();
  const C* pr = rstd.data<C>();
  vector<C> w_wide;
  const C* pw = weight.defined() ? widen_row(weight.data<P>(), d, w_wide) : nullptr;
  T* pgx = gx.defined() ? gx.data<T>() : nullptr;
  C* pgw = gweight.defined() ? gweight.data<C>() : nullptr;
  if (rows == 0) {
    if (pgw) std::fill(pgw, pgw + d, C(0));
    return;
  }
  const int64_t chunks = std::clamp<int64_t>((rows * d + kGrainElems - 1) / kGrainElems, 1,
                                             std::min(rows, kMaxChunks));
  vector<double> partial(pgw ? static_cast<size_t>(chunks * d) : 0, 0.0);
  parallel_for(0, chunks, 1, [&](int64_t clo, int64_t chi) {
    vector<C> g_wide, x_wide, dxhat(d), out(pgx ? d : 0);
    for (int64_t c = clo; c < chi; ++c) {
      double* sw = pgw ? partial.data() + c * d : nullptr;
      for (int64_t r = c * rows / chunks; r < (c + 1) * rows / chunks; ++r) {
        const C* gr = widen_row(pg + r * d, d, g_wide);
        const C* xr = widen_row(px + r * d, d, x_wide);
        const C rs = pr[r];
        if (pgx) {
          if (pw) {
            for (int64_t i = 0; i < d; ++i) dxhat[i] = gr[i] * pw[i];
          } else {
            std::copy(gr, gr + d, dxhat.begin());
          }
          // mean(dxhat * xhat) = rstd * mean(dxhat * x)
          const C k = static_cast<C>(lane_dot(dxhat.data(), xr, d) * rs / d);
          C* o = nullptr;
          if constexpr (is_16bit_v<T>)
            o = out.data();
          else
            o = pgx + r * d;
          for (int64_t i = 0; i < d; ++i) o[i] = rs * (dxhat[i] - xr[i] * rs * k);
          if constexpr (is_16bit_v<T>) narrow_row(o, pgx + r * d, d);
        }
        if (sw)
          for (int64_t i = 0; i < d; ++i) sw[i] += static_cast<double>(gr[i]) * (xr[i] * rs);
      }
    }
  });
  if (!pgw) return;
  for (int64_t i = 0; i < d; ++i) {
    double s = 0;
    for (int64_t c = 0; c < chunks; ++c) s += partial[c * d + i];
    pgw[i] = static_cast<C>(s);
  }
}

void rms_norm_backward_cpu(const Tensor& g, const Tensor& x, const Tensor& rstd,
                           const Tensor& weight, Tensor& gx, Tensor& gweight) {
  dispatch_floating_with_params(x, weight, "rms_norm backward", [&](auto zt, auto zp) {
    backward_rows<decltype(zt), decltype(zp)>(g, x, rstd, weight, gx, gweight);
  });
}

}  // namespace

GPIPE_ISA_KERNEL(rms_norm_forward, rms_norm_forward_cpu);
GPIPE_ISA_KERNEL(rms_norm_backward, rms_norm_backward_cpu);

}  // namespace gpipe::ops::cpu::GPIPE_ISA_NS
