// Softmax CPU kernels. The tensor is viewed as [outer, n, inner] around the
// softmax axis. With inner == 1 (the last axis, the common case) each row is
// contiguous: one pass for the max, one for exp and the sum, one to scale.
// Otherwise a task owns a block of up to kColBlock adjacent inner columns of
// one outer slice and sweeps the n rows of that block, keeping the running
// max / sum for all its columns in a small buffer, so every inner loop runs
// over contiguous memory. Inner loops are Eigen array expressions, so exp is
// Eigen's vectorised one (see exp_shifted for exact zeros). Tasks are independent: results do not
// depend on the thread count.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/cpu/isa/prelude.h"  // this file is built per ISA level: Note [CPU ISA kernels]
#include "ops/cpu/isa/rows.h"
#include "ops/softmax_kernels.h"

namespace gpipe::ops::cpu::GPIPE_ISA_NS {
namespace {

constexpr int64_t kColBlock = 256;
constexpr int64_t kGrainElems = 1 << 14;

// Exponentials of a row, exactly 0 where the argument is below kExpCutoff
// (the fix-up loop, which the compiler vectorises, makes a masked key's
// probability exactly 0).
// out[i] = exp(a[i] - shift).
template <class T>
void exp_shifted(const T* a, T shift, T* out, int64_t n) {
  Vec<T>(out, n) = (ConstVec<T>(a, n) - shift).exp();
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] - shift < kExpCutoff<T> ? T(0) : out[i];
}

// out[i] = exp(a[i] - shift[i]).
template <class T>
void exp_shifted(const T* a, const T* shift, T* out, int64_t n) {
  Vec<T>(out, n) = (ConstVec<T>(a, n) - ConstVec<T>(shift, n)).exp();
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] - shift[i] < kExpCutoff<T> ? T(0) : out[i];
}

// Runs fn(o, c0, c1) over every (outer slice, column block) pair in parallel.
template <class F>
void for_each_block(const AxisView& g, const F& fn) {
  const int64_t blocks = (g.inner + kColBlock - 1) / kColBlock;
  const int64_t tasks = g.outer * blocks;
  const int64_t work = std::max<int64_t>(1, g.n * std::min(g.inner, kColBlock));
  parallel_for(0, tasks, std::max<int64_t>(1, kGrainElems / work), [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t o = t / blocks, c0 = (t % blocks) * kColBlock;
      fn(o, c0, std::min(g.inner, c0 + kColBlock));
    }
  });
}

// Runs fn(r) for every row r of an [outer, n] tensor (inner == 1) in parallel.
template <class F>
void for_each_row(const AxisView& g, const F& fn) {
  parallel_for(0, g.outer, std::max<int64_t>(1, kGrainElems / g.n), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) fn(r);
  });
}

// Forward on one contiguous row.
template <class T, bool kLog>
void forward_row(const T* px, T* py, int64_t n) {
  ConstVec<T> x(px, n);
  Vec<T> y(py, n);
  const T mx = x.maxCoeff();
  if constexpr (kLog) {
    y = x - (mx + std::log((x - mx).exp().sum()));  // a clamped exp(-inf) adds nothing
  } else {
    exp_shifted(px, mx, py, n);
    y *= T(1) / y.sum();
  }
}

// Forward on a block: x/y point at element (o, 0, c0); rows are `stride`
// apart and `w` columns wide. mx and sum are scratch of length w.
template <class T, bool kLog>
void forward_block(const T* x, T* y, int64_t n, int64_t stride, int64_t w, T* mx_buf, T* sum_buf) {
  Vec<T> mx(mx_buf, w), sum(sum_buf, w);
  mx.setConstant(-std::numeric_limits<T>::infinity());
  sum.setZero();
  for (int64_t j = 0; j < n; ++j) mx = mx.max(ConstVec<T>(x + j * stride, w));
  for (int64_t j = 0; j < n; ++j) {
    ConstVec<T> xr(x + j * stride, w);
    if constexpr (kLog) {
      sum += (xr - mx).exp();
    } else {
      exp_shifted(x + j * stride, mx_buf, y + j * stride, w);
      sum += ConstVec<T>(y + j * stride, w);
    }
  }
  if constexpr (kLog) {
    sum = mx + sum.log();  // log-sum-exp
    for (int64_t j = 0; j < n; ++j)
      Vec<T>(y + j * stride, w) = ConstVec<T>(x + j * stride, w) - sum;
  } else {
    sum = sum.inverse();
    for (int64_t j = 0; j < n; ++j) Vec<T>(y + j * stride, w) *= sum;
  }
}

template <bool kLog>
void forward_cpu(const Tensor& x, int64_t axis, Tensor& y) {
  dispatch_floating(x.dtype(), kLog ? "log_softmax" : "softmax", [&](auto z) {
    using T = decltype(z);
    const AxisView g = axis_view(x.shape(), axis);
    if (x.numel() == 0) return;
    const T* px = x.data<T>();
    T* py = y.data<T>();
    if (g.inner == 1) {
      for_each_row(g, [&](int64_t r) { forward_row<T, kLog>(px + r * g.n, py + r * g.n, g.n); });
      return;
    }
    for_each_block(g, [&](int64_t o, int64_t c0, int64_t c1) {
      T buf[2 * kColBlock];
      const int64_t off = o * g.n * g.inner + c0;
      forward_block<T, kLog>(px + off, py + off, g.n, g.inner, c1 - c0, buf, buf + kColBlock);
    });
  });
}

// Backward on one contiguous row. softmax: gx = y * (g - sum(g * y));
// log_softmax: gx = g - exp(y) * sum(g).
template <class T, bool kLog>
void backward_row(const T* py, const T* pg, T* pgx, int64_t n) {
  ConstVec<T> y(py, n), g(pg, n);
  Vec<T> gx(pgx, n);
  if constexpr (kLog) {
    exp_shifted(py, T(0), pgx, n);
    gx = g - gx * g.sum();
  } else {
    gx = y * (g - (g * y).sum());
  }
}

// Backward on a block (see forward_block); acc is scratch of length w.
template <class T, bool kLog>
void backward_block(const T* y, const T* gy, T* gx, int64_t n, int64_t stride, int64_t w,
                    T* acc_buf) {
  Vec<T> acc(acc_buf, w);
  acc.setZero();
  for (int64_t j = 0; j < n; ++j) {
    ConstVec<T> gr(gy + j * stride, w);
    if constexpr (kLog) {
      acc += gr;
    } else {
      acc += gr * ConstVec<T>(y + j * stride, w);
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    ConstVec<T> yr(y + j * stride, w), gr(gy + j * stride, w);
    Vec<T> xr(gx + j * stride, w);
    if constexpr (kLog) {
      exp_shifted(y + j * stride, T(0), gx + j * stride, w);
      xr = gr - xr * acc;
    } else {
      xr = yr * (gr - acc);
    }
  }
}

template <bool kLog>
void backward_cpu(const Tensor& y, const Tensor& gy, int64_t axis, Tensor& gx) {
  dispatch_floating(y.dtype(), kLog ? "log_softmax backward" : "softmax backward", [&](auto z) {
    using T = decltype(z);
    const AxisView g = axis_view(y.shape(), axis);
    if (y.numel() == 0) return;
    const T* py = y.data<T>();
    const T* pg = gy.data<T>();
    T* px = gx.data<T>();
    if (g.inner == 1) {
      for_each_row(g, [&](int64_t r) {
        const int64_t off = r * g.n;
        backward_row<T, kLog>(py + off, pg + off, px + off, g.n);
      });
      return;
    }
    for_each_block(g, [&](int64_t o, int64_t c0, int64_t c1) {
      T acc[kColBlock];
      const int64_t off = o * g.n * g.inner + c0;
      backward_block<T, kLog>(py + off, pg + off, px + off, g.n, g.inner, c1 - c0, acc);
    });
  });
}

void softmax_cpu(const Tensor& x, int64_t axis, Tensor& y) { forward_cpu<false>(x, axis, y); }
void log_softmax_cpu(const Tensor& x, int64_t axis, Tensor& y) { forward_cpu<true>(x, axis, y); }
void softmax_backward_cpu(const Tensor& y, const Tensor& g, int64_t axis, Tensor& gx) {
  backward_cpu<false>(y, g, axis, gx);
}
void log_softmax_backward_cpu(const Tensor& y, const Tensor& g, int64_t axis, Tensor& gx) {
  backward_cpu<true>(y, g, axis, gx);
}

}  // namespace

GPIPE_ISA_KERNEL(softmax_forward, softmax_cpu);
GPIPE_ISA_KERNEL(log_softmax_forward, log_softmax_cpu);
GPIPE_ISA_KERNEL(softmax_backward, softmax_backward_cpu);
GPIPE_ISA_KERNEL(log_softmax_backward, log_softmax_backward_cpu);

}  // namespace gpipe::ops::cpu::GPIPE_ISA_NS
