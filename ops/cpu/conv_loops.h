// conv2d's CPU building blocks (ops/cpu/conv.cc's, built with it once per
// ISA level: Note [CPU ISA kernels] in ops/cpu/isa/abi.h): the geometry of
// one call, im2col / col2im, the (sample, group) task loops, and the
// depthwise path's direct loops (one input channel per group, a kernel tap
// at a time over contiguous output rows).
#pragma once

#include <algorithm>
#include <cstring>
#include <vector>

#include "ops/conv_kernels.h"
#include "ops/cpu/blas.h"
#include "ops/cpu/isa/prelude.h"  // built per ISA level: Note [CPU ISA kernels]

namespace gpipe::ops::cpu::GPIPE_ISA_NS {
namespace {

struct Geometry {
  int64_t n, c, h, w, o, kh, kw, oh, ow;
  int64_t groups, cg, og;  // channels per group (in, out)
  int64_t k;               // cg * kh * kw: rows of a column buffer
  int64_t hw, ohw;         // plane sizes
  Conv2dParams p;

  Geometry(const Shape& x, const Shape& weight, const Shape& y, const Conv2dParams& params)
      : n(x[0]),
        c(x[1]),
        h(x[2]),
        w(x[3]),
        o(weight[0]),
        kh(weight[2]),
        kw(weight[3]),
        oh(y[2]),
        ow(y[3]),
        groups(params.groups),
        cg(c / groups),
        og(o / groups),
        k(cg * kh * kw),
        hw(h * w),
        ohw(oh * ow),
        p(params) {}

  bool pointwise() const {
    return kh == 1 && kw == 1 && p.stride_h == 1 && p.stride_w == 1 && p.pad_h == 0 && p.pad_w == 0;
  }
  bool depthwise() const { return cg == 1 && groups > 1; }
};

// Output positions [lo, hi) along one axis whose input position
// out * stride + offset lies inside [0, size).
void valid_range(int64_t offset, int64_t stride, int64_t size, int64_t out, int64_t& lo,
                 int64_t& hi) {
  lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  const int64_t last = size - 1 - offset;
  hi = last < 0 ? 0 : std::min(out, last / stride + 1);
  lo = std::min(lo, hi);
}

// Inner loops go through Eigen maps: -O2 does not auto-vectorise loops that
// need an aliasing check, Eigen's explicit SIMD does.
template <class T>
using ArrayMap = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>, 0, Eigen::InnerStride<>>;
template <class T>
using ConstArrayMap = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>, 0, Eigen::InnerStride<>>;

// dst[q * dst_stride] += a * src[q * src_stride] for q in [0, n).
template <class T>
void axpy(int64_t n, T a, const T* src, int64_t src_stride, T* dst, int64_t dst_stride) {
  if (n <= 0) return;
  if (src_stride == 1 && dst_stride == 1) {
    Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>(dst, n) +=
        a * Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(src, n);
  } else {
    ArrayMap<T>(dst, n, Eigen::InnerStride<>(dst_stride)) +=
        a * ConstArrayMap<T>(src, n, Eigen::InnerStride<>(src_stride));
  }
}

// sum_q a[q] * b[q * b_stride] for q in [0, n).
template <class T>
T dot(int64_t n, const T* a, const T* b, int64_t b_stride) {
  if (n <= 0) return T(0);
  if (b_stride == 1) {
    return (Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(a, n) *
            Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(b, n))
        .sum();
  }
  return (Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(a, n) *
          ConstArrayMap<T>(b, n, Eigen::InnerStride<>(b_stride)))
      .sum();
}

// Scratch of `numel` elements on `like`'s device (workspace memory).
template <class T>
Workspace<T> workspace(const Tensor& like, int64_t numel) {
  return Workspace<T>(like.device(), numel);
}

// Runs body(part, lo, hi) for `parts` contiguous pieces of [0, count), in parallel.
template <class F>
void for_each_part(int64_t count, int64_t parts, const F& body) {
  parallel_for(0, parts, 1, [&](int64_t p_lo, int64_t p_hi) {
    for (int64_t part = p_lo; part < p_hi; ++part)
      body(part, count * part / parts, count * (part + 1) / parts);
  });
}

// Rows of col for input channels [c_lo, c_hi) of one group's planes x[cg, H, W];
// col's rows are ld apart (g.ohw for one sample's buffer).
template <class T>
void im2col(const Geometry& g, const T* x, int64_t c_lo, int64_t c_hi, T* col, int64_t ld) {
  const Conv2dParams& p = g.p;
  for (int64_t c = c_lo; c < c_hi; ++c) {
    const T* xc = x + c * g.hw;
    for (int64_t i = 0; i < g.kh; ++i) {
      int64_t h_lo, h_hi;
      valid_range(i * p.dilation_h - p.pad_h, p.stride_h, g.h, g.oh, h_lo, h_hi);
      for (int64_t j = 0; j < g.kw; ++j) {
        const int64_t w_off = j * p.dilation_w - p.pad_w;
        int64_t w_lo, w_hi;
        valid_range(w_off, p.stride_w, g.w, g.ow, w_lo, w_hi);
        T* row = col + ((c * g.kh + i) * g.kw + j) * ld;
        std::fill(row, row + h_lo * g.ow, T(0));
        std::fill(row + h_hi * g.ow, row + g.ohw, T(0));
        for (int64_t r = h_lo; r < h_hi; ++r) {
          const T* xr = xc + (r * p.stride_h + i * p.dilation_h - p.pad_h) * g.w + w_off;
          T* out = row + r * g.ow;
          std::fill(out, out + w_lo, T(0));
          std::fill(out + w_hi, out + g.ow, T(0));
          if (p.stride_w == 1) {
            std::copy(xr + w_lo, xr + w_hi, out + w_lo);
          } else {
            for (int64_t q = w_lo; q < w_hi; ++q) out[q] = xr[q * p.stride_w];
          }
        }
      }
    }
  }
}

// Adds col's rows (ld apart) for input channels [c_lo, c_hi) back into planes
// gx[cg, H, W].
template <class T>
void col2im(const Geometry& g, const T* col, int64_t c_lo, int64_t c_hi, T* gx, int64_t ld) {
  const Conv2dParams& p = g.p;
  for (int64_t c = c_lo; c < c_hi; ++c) {
    T* gc = gx + c * g.hw;
    std::fill(gc, gc + g.hw, T(0));
    for (int64_t i = 0; i < g.kh; ++i) {
      int64_t h_lo, h_hi;
      valid_range(i * p.dilation_h - p.pad_h, p.stride_h, g.h, g.oh, h_lo, h_hi);
      for (int64_t j = 0; j < g.kw; ++j) {
        const int64_t w_off = j * p.dilation_w - p.pad_w;
        int64_t w_lo, w_hi;
        valid_range(w_off, p.stride_w, g.w, g.ow, w_lo, w_hi);
        const T* row = col + ((c * g.kh + i) * g.kw + j) * ld;
        for (int64_t r = h_lo; r < h_hi; ++r) {
          T* gr = gc + (r * p.stride_h + i * p.dilation_h - p.pad_h) * g.w + w_off;
          const T* in = row + r * g.ow;
          axpy(w_hi - w_lo, T(1), in + w_lo, 1, gr + w_lo * p.stride_w, p.stride_w);
        }
      }
    }
  }
}

// Calls fn(task, col, parallel) for every (sample, group) task: in parallel
// over tasks with one column buffer per thread when there are enough of them,
// else in order with `parallel` set (the caller then splits its own work).
template <class T, class F>
void for_each_task(const Geometry& g, const Tensor& like, bool need_col, const F& fn) {
  const int64_t tasks = g.n * g.groups;
  const int64_t threads = intra_op_threads();
  const int64_t col_size = need_col ? g.k * g.ohw : 0;
  if (tasks >= threads && threads > 1) {
    Workspace<T> cols = workspace<T>(like, threads * col_size);
    T* base = cols.data();
    for_each_part(tasks, threads, [&](int64_t part, int64_t lo, int64_t hi) {
      for (int64_t t = lo; t < hi; ++t) fn(t, base + part * col_size, false);
    });
  } else {
    Workspace<T> cols = workspace<T>(like, col_size);
    for (int64_t t = 0; t < tasks; ++t) fn(t, cols.data(), true);
  }
}

template <class T>
void im2col_maybe_parallel(const Geometry& g, const T* x, T* col, bool parallel) {
  if (!parallel) return im2col(g, x, 0, g.cg, col, g.ohw);
  parallel_for(0, g.cg, 1, [&](int64_t lo, int64_t hi) { im2col(g, x, lo, hi, col, g.ohw); });
}

template <class T>
void gemm_maybe_parallel(bool parallel, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                         const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c,
                         int64_t ldc) {
  if (parallel)
    cpu::parallel_gemm(ta, tb, m, n, k, T(1), a, lda, b, ldb, beta, c, ldc);
  else
    cpu::gemm(ta, tb, m, n, k, T(1), a, lda, b, ldb, beta, c, ldc);
}

// ---------------------------------------------------------------- depthwise

template <class T>
void depthwise_forward(const Geometry& g, const T* x, const T* w, const T* b, T* y) {
  const Conv2dParams& p = g.p;
  parallel_for(0, g.n * g.o, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t plane = lo; plane < hi; ++plane) {
      const int64_t n = plane / g.o, oc = plane % g.o;
      const T* xc = x + (n * g.c + oc / g.og) * g.hw;
      T* yp = y + plane * g.ohw;
      std::fill(yp, yp + g.ohw, b ? b[oc] : T(0));
      for (int64_t i = 0; i < g.kh; ++i) {
        int64_t h_lo, h_hi;
        valid_range(i * p.dilation_h - p.pad_h, p.stride_h, g.h, g.oh, h_lo, h_hi);
        for (int64_t j = 0; j < g.kw; ++j) {
          const T wv = w[(oc * g.kh + i) * g.kw + j];
          const int64_t w_off = j * p.dilation_w - p.pad_w;
          int64_t w_lo, w_hi;
          valid_range(w_off, p.stride_w, g.w, g.ow, w_lo, w_hi);
          for (int64_t r = h_lo; r < h_hi; ++r) {
            const T* xr = xc + (r * p.stride_h + i * p.dilation_h - p.pad_h) * g.w + w_off;
            T* yr = yp + r * g.ow;
            axpy(w_hi - w_lo, wv, xr + w_lo * p.stride_w, p.stride_w, yr + w_lo, 1);
          }
        }
      }
    }
  });
}

template <class T>
void depthwise_backward_input(const Geometry& g, const T* gy, const T* w, T* gx) {
  const Conv2dParams& p = g.p;
  parallel_for(0, g.n * g.c, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t plane = lo; plane < hi; ++plane) {
      const int64_t n = plane / g.c, c = plane % g.c;
      T* gp = gx + plane * g.hw;
      std::fill(gp, gp + g.hw, T(0));
      for (int64_t m = 0; m < g.og; ++m) {
        const int64_t oc = c * g.og + m;
        const T* gyp = gy + (n * g.o + oc) * g.ohw;
        for (int64_t i = 0; i < g.kh; ++i) {
          int64_t h_lo, h_hi;
          valid_range(i * p.dilation_h - p.pad_h, p.stride_h, g.h, g.oh, h_lo, h_hi);
          for (int64_t j = 0; j < g.kw; ++j) {
            const T wv = w[(oc * g.kh + i) * g.kw + j];
            const int64_t w_off = j * p.dilation_w - p.pad_w;
            int64_t w_lo, w_hi;
            valid_range(w_off, p.stride_w, g.w, g.ow, w_lo, w_hi);
            for (int64_t r = h_lo; r < h_hi; ++r) {
              T* gr = gp + (r * p.stride_h + i * p.dilation_h - p.pad_h) * g.w + w_off;
              const T* gyr = gyp + r * g.ow;
              axpy(w_hi - w_lo, wv, gyr + w_lo, 1, gr + w_lo * p.stride_w, p.stride_w);
            }
          }
        }
      }
    }
  });
}

// One thread per output channel, samples in order: independent of the thread count.
template <class T>
void depthwise_backward_weight(const Geometry& g, const T* gy, const T* x, T* gw) {
  const Conv2dParams& p = g.p;
  parallel_for(0, g.o, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t oc = lo; oc < hi; ++oc) {
      for (int64_t i = 0; i < g.kh; ++i) {
        int64_t h_lo, h_hi;
        valid_range(i * p.dilation_h - p.pad_h, p.stride_h, g.h, g.oh, h_lo, h_hi);
        for (int64_t j = 0; j < g.kw; ++j) {
          const int64_t w_off = j * p.dilation_w - p.pad_w;
          int64_t w_lo, w_hi;
          valid_range(w_off, p.stride_w, g.w, g.ow, w_lo, w_hi);
          T acc = 0;
          for (int64_t n = 0; n < g.n; ++n) {
            const T* xc = x + (n * g.c + oc / g.og) * g.hw;
            const T* gyp = gy + (n * g.o + oc) * g.ohw;
            for (int64_t r = h_lo; r < h_hi; ++r) {
              const T* xr = xc + (r * p.stride_h + i * p.dilation_h - p.pad_h) * g.w + w_off;
              const T* gyr = gyp + r * g.ow;
              acc += dot(w_hi - w_lo, gyr + w_lo, xr + w_lo * p.stride_w, p.stride_w);
            }
          }
          gw[(oc * g.kh + i) * g.kw + j] = acc;
        }
      }
    }
  });
}

}  // namespace
}  // namespace gpipe::ops::cpu::GPIPE_ISA_NS
