// Layer norm CPU kernels, one row (the last axis, contiguous) at a time.
//
// Forward: two passes over the row give the mean and then the biased
// variance as the mean of (x - mean)^2 (no cancellation for rows with a large
// offset), then y = (x - mean) * rstd * gamma + beta in one pass. Row
// reductions are Eigen sums (vectorised; plain loops would not be, as the
// compiler may not reassociate floating-point adds).
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
#include "ops/layer_norm_kernels.h"

namespace gpipe::ops::cpu::GPIPE_ISA_NS {
namespace {

constexpr int64_t kGrainElems = 1 << 14;
constexpr int64_t kMaxChunks = 32;

template <class T>
using Vec = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <class T>
using ConstVec = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

template <class T>
const T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}
template <class T>
T* mutable_or_null(Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

void layer_norm_forward_cpu(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps,
                            Tensor& y, Tensor& mean, Tensor& rstd) {
  dispatch_floating(x.dtype(), "layer_norm", [&](auto z) {
    using T = decltype(z);
    const int64_t d = x.size(-1);
    const int64_t rows = x.numel() / d;
    const T* px = x.data<T>();
    const T* pg = data_or_null<T>(gamma);
    const T* pb = data_or_null<T>(beta);
    T* py = y.data<T>();
    T* pm = mean.data<T>();
    T* pr = rstd.data<T>();
    parallel_for(0, rows, std::max<int64_t>(1, kGrainElems / d), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const T* xr = px + r * d;
        T* yr = py + r * d;
        ConstVec<T> row(xr, d);
        const T m = row.sum() / static_cast<T>(d);
        const double var = static_cast<double>((row - m).square().sum()) / d;
        const T rs = static_cast<T>(1.0 / std::sqrt(var + eps));
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
      }
    });
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
  // Plain loops, not Eigen reductions: a vectorised reduction's order depends
  // on the address alignment of dxhat (heap scratch), which would make the
  // result differ from call to call in the last bits.
  double sa = 0, sb = 0;
  for (int64_t i = 0; i < d; ++i) {
    sa += dxhat[i];
    sb += static_cast<double>(dxhat[i]) * (xr[i] - m);
  }
  const T ma = static_cast<T>(sa / d);
  const T mb = static_cast<T>(sb * rs / d);
  Vec<T>(gxr, d) = rs * (dh - ma - (x - m) * (rs * mb));
}

void layer_norm_backward_cpu(const Tensor& g, const Tensor& x, const Tensor& mean,
                             const Tensor& rstd, const Tensor& gamma, Tensor& gx, Tensor& ggamma,
                             Tensor& gbeta) {
  dispatch_floating(x.dtype(), "layer_norm backward", [&](auto z) {
    using T = decltype(z);
    const int64_t d = x.size(-1);
    const int64_t rows = x.numel() / d;
    const T* pgy = g.data<T>();
    const T* px = x.data<T>();
    const T* pm = mean.data<T>();
    const T* pr = rstd.data<T>();
    const T* pgamma = data_or_null<T>(gamma);
    T* pgx = mutable_or_null<T>(gx);
    T* pgg = mutable_or_null<T>(ggamma);
    T* pgb = mutable_or_null<T>(gbeta);
    const bool params = pgg || pgb;
    if (rows == 0) {
      if (pgg) std::fill(pgg, pgg + d, T(0));
      if (pgb) std::fill(pgb, pgb + d, T(0));
      return;
    }

    // Fixed partition of the rows (see the file comment).
    const int64_t chunks = std::clamp<int64_t>((rows * d + kGrainElems - 1) / kGrainElems, 1,
                                               std::min(rows, kMaxChunks));
    vector<double> partial(params ? static_cast<size_t>(chunks * 2 * d) : 0, 0.0);
    parallel_for(0, chunks, 1, [&](int64_t clo, int64_t chi) {
      vector<T> scratch(pgx ? d : 0);
      for (int64_t c = clo; c < chi; ++c) {
        const int64_t r0 = c * rows / chunks, r1 = (c + 1) * rows / chunks;
        double* sg = params ? partial.data() + c * 2 * d : nullptr;
        double* sb = params ? sg + d : nullptr;
        for (int64_t r = r0; r < r1; ++r) {
          const T* gr = pgy + r * d;
          const T* xr = px + r * d;
          const T m = pm[r], rs = pr[r];
          if (pgx) row_input_grad(gr, xr, pgamma, m, rs, d, scratch.data(), pgx + r * d);
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
      if (pgg) pgg[i] = static_cast<T>(sg);
      if (pgb) pgb[i] = static_cast<T>(sb);
    }
  });
}

}  // namespace

GPIPE_ISA_KERNEL(layer_norm_forward, layer_norm_forward_cpu);
GPIPE_ISA_KERNEL(layer_norm_backward, layer_norm_backward_cpu);

}  // namespace gpipe::ops::cpu::GPIPE_ISA_NS
