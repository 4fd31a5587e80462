// CPU kernels for max_pool2d and avg_pool2d (NCHW).
//
// Every (sample, channel) plane is independent, so the kernels run in
// parallel over planes. Within a plane they work one output row at a time
// and walk the window tap by tap, each tap updating the whole row of
// outputs: the outputs are independent chains (a per-output window loop
// would serialise on the running max), and the range of outputs a tap hits
// in-bounds is computed once, so the inner loop has no bounds tests.
//
// Max pooling visits taps in row-major window order with a strict '>', so it
// keeps the first maximal element, and records its plane index (h * W + w)
// for backward, which scatter-adds grad_y there. The tap loop is branch-free
// (compare and blend, int32 indices beside float values) so it vectorises.
// A NaN in a window wins (the first one), as in PyTorch; outputs whose window
// holds a NaN are redone on a slow path.
// Average pooling divides by the window clipped to the padded input
// (count_include_pad) or by the number of in-bounds elements. Backward of
// both writes each plane of grad_x from that plane's outputs only, which keeps
// it race-free.
#include <algorithm>
#include <limits>
#include <vector>

#include "ops/cpu/isa/prelude.h"  // this file is built per ISA level: Note [CPU ISA kernels]
#include "ops/pool_kernels.h"

namespace gpipe::ops::cpu::GPIPE_ISA_NS {
namespace {

// Output positions [lo, hi) along one axis whose input position
// out * stride + offset lies inside [0, size).
void valid_range(int64_t offset, int64_t stride, int64_t size, int64_t out, int64_t& lo,
                 int64_t& hi) {
  lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  const int64_t last = size - 1 - offset;
  hi = last < 0 ? 0 : std::min(out, last / stride + 1);
  lo = std::min(lo, hi);
}

// The part of one axis a window covers: [lo, hi) in bounds, and the number of
// positions inside the padded input (PyTorch's count_include_pad divisor).
struct Span {
  int64_t lo, hi, padded;
};

Span span(int64_t o, int64_t kernel, int64_t stride, int64_t pad, int64_t size) {
  const int64_t start = o * stride - pad, end = std::min(start + kernel, size + pad);
  return Span{std::max<int64_t>(start, 0), std::min(end, size), end - start};
}

struct PlaneGeometry {
  int64_t planes, h, w, oh, ow;
  Pool2dParams p;

  vector<int64_t> tap_lo, tap_hi;  // per window column j, see tap_range

  PlaneGeometry(const Shape& in, const Shape& out, const Pool2dParams& params)
      : planes(in[0] * in[1]),
        h(in[2]),
        w(in[3]),
        oh(out[2]),
        ow(out[3]),
        p(params),
        tap_lo(p.kernel_w),
        tap_hi(p.kernel_w) {
    for (int64_t j = 0; j < p.kernel_w; ++j)
      valid_range(j - p.pad_w, p.stride_w, w, ow, tap_lo[j], tap_hi[j]);
  }

  Span rows(int64_t r) const { return span(r, p.kernel_h, p.stride_h, p.pad_h, h); }
  Span cols(int64_t q) const { return span(q, p.kernel_w, p.stride_w, p.pad_w, w); }
  // Outputs [lo, hi) of a row that window column j reaches in bounds.
  void tap_range(int64_t j, int64_t& lo, int64_t& hi) const {
    lo = tap_lo[j];
    hi = tap_hi[j];
  }
  // Planes per parallel chunk: enough work to pay for the hand-off.
  int64_t grain() const {
    return std::max<int64_t>(1, 32768 / std::max<int64_t>(1, oh * ow * p.kernel_h * p.kernel_w));
  }
};

template <class T>
using ArrayMap = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>, 0, Eigen::InnerStride<>>;
template <class T>
using ConstArrayMap = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>, 0, Eigen::InnerStride<>>;

// dst[q * dst_stride] += src[q * src_stride] * scale[q] (scale may be null = 1), q in [0, n).
template <class T>
void add_strided(int64_t n, const T* src, int64_t src_stride, const T* scale, T* dst,
                 int64_t dst_stride) {
  if (n <= 0) return;
  ArrayMap<T> d(dst, n, Eigen::InnerStride<>(dst_stride));
  const ConstArrayMap<T> s(src, n, Eigen::InnerStride<>(src_stride));
  if (scale)
    d += s * ConstArrayMap<T>(scale, n, Eigen::InnerStride<>(1));
  else
    d += s;
}

// One output of max pooling by a direct window loop, NaN-aware (slow path).
template <class T>
void max_window(const PlaneGeometry& g, const T* xp, int64_t r, int64_t q, T& best,
                int64_t& best_i) {
  const Span rs = g.rows(r), cs = g.cols(q);
  best_i = rs.lo * g.w + cs.lo;
  best = xp[best_i];
  for (int64_t i = rs.lo; i < rs.hi; ++i)
    for (int64_t j = cs.lo; j < cs.hi; ++j) {
      const T v = xp[i * g.w + j];
      if (best != best) return;
      if (v > best || v != v) {
        best = v;
        best_i = i * g.w + j;
      }
    }
}

// One window tap's pass over outputs [q_lo, q_hi) of a row: the running max
// and the plane index of its first maximal element, and a flag where the
// tap read a NaN. S is the column stride when it is known at compile time
// (1 or 2), else 0 (then `stride`). The index type I is int32 for planes
// under 2^31 elements: as wide as a float lane, so the loop vectorises into
// compares and masks.
template <int S, class T, class I>
void max_tap(const T* __restrict xp, int64_t base, int64_t stride, int64_t q_lo, int64_t q_hi,
             T* __restrict best, I* __restrict best_i, I* __restrict nan) {
  const int64_t st = S ? S : stride;
  for (int64_t q = q_lo; q < q_hi; ++q) {
    const I at = static_cast<I>(base + q * st);
    const T v = xp[base + q * st], b = best[q];
    // Masks, not selects: GCC if-converts these at every level (selects it
    // leaves as branches at x86-64-v2, which mispredict on data).
    const I take = -static_cast<I>(v > b);
    best_i[q] = (at & take) | (best_i[q] & ~take);
    best[q] = std::max(b, v);  // b unless v > b (a NaN v never wins here)
    nan[q] |= static_cast<I>(v != v);
  }
}

template <class T, class I>
void max_forward_rows(const PlaneGeometry& g, const T* x, T* y, int64_t* argmax) {
  parallel_for(0, g.planes, g.grain(), [&](int64_t lo, int64_t hi) {
    vector<T> best(g.ow);
    vector<I> best_i(g.ow), nan(g.ow);
    for (int64_t plane = lo; plane < hi; ++plane) {
      const T* xp = x + plane * g.h * g.w;
      for (int64_t r = 0; r < g.oh; ++r) {
        const Span rs = g.rows(r);
        for (int64_t q = 0; q < g.ow; ++q) {
          best[q] = -std::numeric_limits<T>::infinity();
          best_i[q] = static_cast<I>(rs.lo * g.w + g.cols(q).lo);  // kept if the window is all -inf
          nan[q] = 0;
        }
        for (int64_t i = rs.lo; i < rs.hi; ++i) {
          for (int64_t j = 0; j < g.p.kernel_w; ++j) {
            int64_t q_lo, q_hi;
            g.tap_range(j, q_lo, q_hi);
            const int64_t base = i * g.w + j - g.p.pad_w, stride = g.p.stride_w;
            if (stride == 1)
              max_tap<1>(xp, base, stride, q_lo, q_hi, best.data(), best_i.data(), nan.data());
            else if (stride == 2)
              max_tap<2>(xp, base, stride, q_lo, q_hi, best.data(), best_i.data(), nan.data());
            else
              max_tap<0>(xp, base, stride, q_lo, q_hi, best.data(), best_i.data(), nan.data());
          }
        }
        T* yr = y + (plane * g.oh + r) * g.ow;
        int64_t* ar = argmax ? argmax + (plane * g.oh + r) * g.ow : nullptr;
        for (int64_t q = 0; q < g.ow; ++q) {
          if (nan[q]) {
            int64_t at;
            max_window(g, xp, r, q, yr[q], at);
            if (ar) ar[q] = at;
            continue;
          }
          yr[q] = best[q];
          if (ar) ar[q] = best_i[q];
        }
      }
    }
  });
}

// Note [Max pooling on padded planes]. Small planes (AmoebaNet's 8x8 down to
// 1x1) make rows too short to vectorise. Instead a chunk of planes is copied
// into one buffer with a -inf border (hp x wp per plane), and every window
// tap becomes one contiguous pass over the whole chunk: the window anchored
// at buffer position e reads e + i * wp + j for tap (i, j). The passes run
// over every anchor (border ones too, wasted but vectorised); the outputs
// are then read off at the strided anchors. Each anchor keeps the number of
// the tap that won (taps in row-major window order, strict '>', so the
// first maximal element), -1 while none has (a window of -inf only: its
// first in-bounds element, as on the row path), and a NaN flag.
template <class T>
void max_plane_tap(const T* __restrict src, int64_t len, int32_t t, T* __restrict best,
                   int32_t* __restrict tap, int32_t* __restrict nan) {
  for (int64_t e = 0; e < len; ++e) {
    const T v = src[e], b = best[e];
    const int32_t take = -static_cast<int32_t>(v > b);
    tap[e] = (t & take) | (tap[e] & ~take);
    best[e] = std::max(b, v);
    nan[e] |= static_cast<int32_t>(v != v);
  }
}

template <class T>
void max_forward_planes(const PlaneGeometry& g, const T* x, T* y, int64_t* argmax) {
  const Pool2dParams& p = g.p;
  const int64_t hp = std::max(g.h + 2 * p.pad_h, (g.oh - 1) * p.stride_h + p.kernel_h);
  const int64_t wp = std::max(g.w + 2 * p.pad_w, (g.ow - 1) * p.stride_w + p.kernel_w);
  const int64_t area = hp * wp, slack = (p.kernel_h - 1) * wp + p.kernel_w;
  const int64_t per_chunk = std::max<int64_t>(1, 8192 / area);  // planes per buffer
  constexpr T kLow = -std::numeric_limits<T>::infinity();
  // Plane index of tap t's element, less that of the window's anchor.
  vector<int64_t> delta(p.kernel_h * p.kernel_w);
  for (int64_t t = 0; t < p.kernel_h * p.kernel_w; ++t)
    delta[t] = (t / p.kernel_w - p.pad_h) * g.w + t % p.kernel_w - p.pad_w;
  parallel_for(0, g.planes, std::max(g.grain(), per_chunk), [&](int64_t lo, int64_t hi) {
    vector<T> buf(per_chunk * area + slack), best(per_chunk * area);
    vector<int32_t> tap(per_chunk * area), nan(per_chunk * area);
    for (int64_t p0 = lo; p0 < hi; p0 += per_chunk) {
      const int64_t np = std::min(per_chunk, hi - p0), len = np * area;
      std::fill(buf.begin(), buf.begin() + len + slack, kLow);
      for (int64_t k = 0; k < np; ++k)
        for (int64_t r = 0; r < g.h; ++r) {
          const T* src = x + ((p0 + k) * g.h + r) * g.w;
          std::copy(src, src + g.w, buf.begin() + k * area + (r + p.pad_h) * wp + p.pad_w);
        }
      std::fill(best.begin(), best.begin() + len, kLow);
      std::fill(tap.begin(), tap.begin() + len, -1);
      std::fill(nan.begin(), nan.begin() + len, 0);
      for (int64_t i = 0; i < p.kernel_h; ++i)
        for (int64_t j = 0; j < p.kernel_w; ++j)
          max_plane_tap(buf.data() + i * wp + j, len, static_cast<int32_t>(i * p.kernel_w + j),
                        best.data(), tap.data(), nan.data());
      for (int64_t k = 0; k < np; ++k) {
        const T* xp = x + (p0 + k) * g.h * g.w;
        for (int64_t r = 0; r < g.oh; ++r) {
          const int64_t o = ((p0 + k) * g.oh + r) * g.ow, e0 = k * area + r * p.stride_h * wp;
          const int64_t at0 = r * p.stride_h * g.w;  // plus the tap's offset and the column
          for (int64_t q = 0; q < g.ow; ++q) {
            const int64_t e = e0 + q * p.stride_w;
            const int32_t t = tap[e];
            int64_t at;
            if (nan[e] != 0) {
              max_window(g, xp, r, q, y[o + q], at);
            } else {
              y[o + q] = best[e];
              at = t < 0 ? g.rows(r).lo * g.w + g.cols(q).lo : at0 + q * p.stride_w + delta[t];
            }
            if (argmax) argmax[o + q] = at;
          }
        }
      }
    }
  });
}

// Unit strides and short rows take the padded-plane path (Note [Max pooling
// on padded planes]); long strided rows the row path, which reads only the
// anchors it needs.
template <class T>
void max_forward(const PlaneGeometry& g, const T* x, T* y, int64_t* argmax) {
  if ((g.p.stride_h == 1 && g.p.stride_w == 1) || g.ow < 16)
    max_forward_planes(g, x, y, argmax);
  else if (g.h * g.w <= std::numeric_limits<int32_t>::max())
    max_forward_rows<T, int32_t>(g, x, y, argmax);
  else
    max_forward_rows<T, int64_t>(g, x, y, argmax);
}

template <class T>
void max_backward(const PlaneGeometry& g, const T* gy, const int64_t* argmax, T* gx) {
  parallel_for(0, g.planes, g.grain(), [&](int64_t lo, int64_t hi) {
    for (int64_t plane = lo; plane < hi; ++plane) {
      T* gxp = gx + plane * g.h * g.w;
      std::fill(gxp, gxp + g.h * g.w, T(0));
      const T* gyp = gy + plane * g.oh * g.ow;
      const int64_t* ap = argmax + plane * g.oh * g.ow;
      for (int64_t e = 0; e < g.oh * g.ow; ++e) gxp[ap[e]] += gyp[e];
    }
  });
}

// 1 / divisor for every output of row r (the column factor varies along it).
template <class T>
void inverse_divisors(const PlaneGeometry& g, int64_t r, vector<T>& inv) {
  const Span rs = g.rows(r);
  for (int64_t q = 0; q < g.ow; ++q) {
    const Span cs = g.cols(q);
    const int64_t count =
        g.p.count_include_pad ? rs.padded * cs.padded : (rs.hi - rs.lo) * (cs.hi - cs.lo);
    inv[q] = T(1) / static_cast<T>(count);
  }
}

template <class T>
void avg_forward(const PlaneGeometry& g, const T* x, T* y) {
  parallel_for(0, g.planes, g.grain(), [&](int64_t lo, int64_t hi) {
    vector<T> inv(g.ow);
    for (int64_t plane = lo; plane < hi; ++plane) {
      const T* xp = x + plane * g.h * g.w;
      for (int64_t r = 0; r < g.oh; ++r) {
        T* yr = y + (plane * g.oh + r) * g.ow;
        std::fill(yr, yr + g.ow, T(0));
        const Span rs = g.rows(r);
        for (int64_t i = rs.lo; i < rs.hi; ++i) {
          for (int64_t j = 0; j < g.p.kernel_w; ++j) {
            int64_t q_lo, q_hi;
            g.tap_range(j, q_lo, q_hi);
            const T* src = xp + i * g.w + j - g.p.pad_w + q_lo * g.p.stride_w;
            add_strided<T>(q_hi - q_lo, src, g.p.stride_w, nullptr, yr + q_lo, 1);
          }
        }
        inverse_divisors(g, r, inv);
        for (int64_t q = 0; q < g.ow; ++q) yr[q] *= inv[q];
      }
    }
  });
}

template <class T>
void avg_backward(const PlaneGeometry& g, const T* gy, T* gx) {
  parallel_for(0, g.planes, g.grain(), [&](int64_t lo, int64_t hi) {
    vector<T> inv(g.ow);
    for (int64_t plane = lo; plane < hi; ++plane) {
      T* gxp = gx + plane * g.h * g.w;
      std::fill(gxp, gxp + g.h * g.w, T(0));
      for (int64_t r = 0; r < g.oh; ++r) {
        const T* gyr = gy + (plane * g.oh + r) * g.ow;
        inverse_divisors(g, r, inv);
        const Span rs = g.rows(r);
        for (int64_t i = rs.lo; i < rs.hi; ++i) {
          for (int64_t j = 0; j < g.p.kernel_w; ++j) {
            int64_t q_lo, q_hi;
            g.tap_range(j, q_lo, q_hi);
            T* dst = gxp + i * g.w + j - g.p.pad_w + q_lo * g.p.stride_w;
            add_strided<T>(q_hi - q_lo, gyr + q_lo, 1, inv.data() + q_lo, dst, g.p.stride_w);
          }
        }
      }
    }
  });
}

void max_pool2d_forward_cpu(const Tensor& x, const Pool2dParams& params, Tensor& y,
                            Tensor& argmax) {
  const PlaneGeometry g(x.shape(), y.shape(), params);
  dispatch_floating(x.dtype(), "max_pool2d", [&](auto z) {
    using T = decltype(z);
    max_forward(g, x.data<T>(), y.data<T>(), argmax.defined() ? argmax.data<int64_t>() : nullptr);
  });
}

void max_pool2d_backward_cpu(const Tensor& grad_y, const Tensor& argmax, Tensor& grad_x) {
  const PlaneGeometry g(grad_x.shape(), grad_y.shape(), Pool2dParams{});
  dispatch_floating(grad_y.dtype(), "max_pool2d backward", [&](auto z) {
    using T = decltype(z);
    max_backward(g, grad_y.data<T>(), argmax.data<int64_t>(), grad_x.data<T>());
  });
}

void avg_pool2d_forward_cpu(const Tensor& x, const Pool2dParams& params, Tensor& y) {
  const PlaneGeometry g(x.shape(), y.shape(), params);
  dispatch_floating(x.dtype(), "avg_pool2d", [&](auto z) {
    using T = decltype(z);
    avg_forward(g, x.data<T>(), y.data<T>());
  });
}

void avg_pool2d_backward_cpu(const Tensor& grad_y, const Pool2dParams& params, Tensor& grad_x) {
  const PlaneGeometry g(grad_x.shape(), grad_y.shape(), params);
  dispatch_floating(grad_y.dtype(), "avg_pool2d backward", [&](auto z) {
    using T = decltype(z);
    avg_backward(g, grad_y.data<T>(), grad_x.data<T>());
  });
}

}  // namespace

GPIPE_ISA_KERNEL(max_pool2d_forward, max_pool2d_forward_cpu);
GPIPE_ISA_KERNEL(max_pool2d_backward, max_pool2d_backward_cpu);
GPIPE_ISA_KERNEL(avg_pool2d_forward, avg_pool2d_forward_cpu);
GPIPE_ISA_KERNEL(avg_pool2d_backward, avg_pool2d_backward_cpu);

}  // namespace gpipe::ops::cpu::GPIPE_ISA_NS
