// Elementwise CPU kernels. Binary ops walk the output row by row (all axes
// but the last); each row is one tight loop whose operand strides are fixed
// (1 for a dense operand, 0 for a broadcast one), so the compiler vectorises
// the common cases. Unary ops are flat loops over contiguous memory.
#include <cmath>

#include "ops/cpu/isa/prelude.h"  // this file is built per ISA level: Note [CPU ISA kernels]
#include "ops/elementwise_kernels.h"

namespace gpipe::ops::cpu::GPIPE_ISA_NS {
namespace {

template <class T, class F>
inline void row_loop(const T* a, int64_t sa, const T* b, int64_t sb, T* o, int64_t n, F f) {
  if (sa == 1 && sb == 1) {
    for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], b[i]);
  } else if (sa == 1 && sb == 0) {
    const T bv = *b;
    for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], bv);
  } else if (sa == 0 && sb == 1) {
    const T av = *a;
    for (int64_t i = 0; i < n; ++i) o[i] = f(av, b[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) o[i] = f(a[i * sa], b[i * sb]);
  }
}

template <class T, class F>
void binary_impl(const Tensor& a, const Tensor& b, Tensor& out, F f) {
  const T* pa = a.base<const T>();
  const T* pb = b.base<const T>();
  T* po = out.data<T>();
  const int64_t numel = out.numel();
  if (numel == 0) return;
  if (a.is_contiguous() && b.is_contiguous() && a.shape() == out.shape() &&
      b.shape() == out.shape()) {
    pa += a.offset();
    pb += b.offset();
    parallel_for(0, numel, 1 << 15, [&](int64_t lo, int64_t hi) {
      row_loop(pa + lo, 1, pb + lo, 1, po + lo, hi - lo, f);
    });
    return;
  }
  const int64_t r = out.rank();
  if (r == 0) {
    po[0] = f(pa[a.offset()], pb[b.offset()]);
    return;
  }
  const int64_t inner = out.shape()[r - 1];
  const int64_t rows = numel / inner;
  const auto& sa = a.strides();
  const auto& sb = b.strides();
  const Shape& shape = out.shape();
  parallel_for(0, rows, std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(inner, 1)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t row = lo; row < hi; ++row) {
                   int64_t oa = a.offset(), ob = b.offset(), rem = row;
                   for (int64_t d = r - 2; d >= 0; --d) {
                     const int64_t i = rem % shape[d];
                     rem /= shape[d];
                     oa += i * sa[d];
                     ob += i * sb[d];
                   }
                   row_loop(pa + oa, sa[r - 1], pb + ob, sb[r - 1], po + row * inner, inner, f);
                 }
               });
}

void binary_cpu(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  dispatch_floating(out.dtype(), "elementwise", [&](auto z) {
    using T = decltype(z);
    switch (op) {
      case BinaryOp::kAdd:
        return binary_impl<T>(a, b, out, [](T x, T y) { return x + y; });
      case BinaryOp::kSub:
        return binary_impl<T>(a, b, out, [](T x, T y) { return x - y; });
      case BinaryOp::kMul:
        return binary_impl<T>(a, b, out, [](T x, T y) { return x * y; });
      case BinaryOp::kDiv:
        return binary_impl<T>(a, b, out, [](T x, T y) { return x / y; });
    }
  });
}

template <class T, class F>
void map1(const Tensor& x, Tensor& out, F f) {
  const T* px = x.data<T>();
  T* po = out.data<T>();
  parallel_for(0, x.numel(), 1 << 14, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) po[i] = f(px[i]);
  });
}

void unary_cpu(UnaryOp op, double alpha, const Tensor& x, Tensor& out) {
  dispatch_floating(x.dtype(), "elementwise", [&](auto z) {
    using T = decltype(z);
    const T al = static_cast<T>(alpha);
    switch (op) {
      case UnaryOp::kNeg:
        return map1<T>(x, out, [](T v) { return -v; });
      case UnaryOp::kRelu:
        return map1<T>(x, out, [](T v) { return v > T(0) ? v : T(0); });
      case UnaryOp::kGelu:
        return parallel_for(0, x.numel(), 1 << 14, [&](int64_t lo, int64_t hi) {
          gelu_rows(x.data<T>() + lo, out.data<T>() + lo, hi - lo);
        });
      case UnaryOp::kTanh:
        return map1<T>(x, out, [](T v) { return std::tanh(v); });
      case UnaryOp::kSigmoid:
        return map1<T>(x, out, [](T v) { return T(1) / (T(1) + std::exp(-v)); });
      case UnaryOp::kExp:
        return map1<T>(x, out, [](T v) { return std::exp(v); });
      case UnaryOp::kLog:
        return map1<T>(x, out, [](T v) { return std::log(v); });
      case UnaryOp::kSqrt:
        return map1<T>(x, out, [](T v) { return std::sqrt(v); });
      case UnaryOp::kAbs:
        return map1<T>(x, out, [](T v) { return std::abs(v); });
      case UnaryOp::kPow:
        if (al == T(2)) return map1<T>(x, out, [](T v) { return v * v; });
        return map1<T>(x, out, [al](T v) { return std::pow(v, al); });
      case UnaryOp::kAddScalar:
        return map1<T>(x, out, [al](T v) { return v + al; });
      case UnaryOp::kMulScalar:
        return map1<T>(x, out, [al](T v) { return v * al; });
    }
  });
}

template <bool kX, bool kY, class T, class F>
inline void grad_loop(const T* __restrict px, const T* __restrict py, const T* __restrict pg,
                      T* __restrict po, int64_t lo, int64_t hi, F f) {
  for (int64_t i = lo; i < hi; ++i) po[i] = pg[i] * f(kX ? px[i] : T(0), kY ? py[i] : T(0));
}

template <class T, class F>
void map_grad(const Tensor& x, const Tensor& y, const Tensor& gy, Tensor& gx, F f) {
  const T* px = x.defined() ? x.data<T>() : nullptr;
  const T* py = y.defined() ? y.data<T>() : nullptr;
  const T* pg = gy.data<T>();
  T* po = gx.data<T>();
  // One loop per operand combination: a pointer test inside the loop would
  // keep it from vectorising (and so would possible aliasing: gx is a fresh tensor).
  parallel_for(0, gy.numel(), 1 << 14, [&](int64_t lo, int64_t hi) {
    if (px && py)
      grad_loop<true, true>(px, py, pg, po, lo, hi, f);
    else if (px)
      grad_loop<true, false>(px, py, pg, po, lo, hi, f);
    else if (py)
      grad_loop<false, true>(px, py, pg, po, lo, hi, f);
    else
      grad_loop<false, false>(px, py, pg, po, lo, hi, f);
  });
}

void unary_backward_cpu(UnaryOp op, double alpha, const Tensor& x, const Tensor& y,
                        const Tensor& gy, Tensor& gx) {
  dispatch_floating(gy.dtype(), "elementwise backward", [&](auto z) {
    using T = decltype(z);
    const T al = static_cast<T>(alpha);
    switch (op) {
      case UnaryOp::kNeg:
        return map_grad<T>(x, y, gy, gx, [](T, T) { return T(-1); });
      case UnaryOp::kRelu:
        return map_grad<T>(x, y, gy, gx, [](T v, T) { return static_cast<T>(v > T(0)); });
      case UnaryOp::kGelu:
        return parallel_for(0, gy.numel(), 1 << 14, [&](int64_t lo, int64_t hi) {
          gelu_grad_rows(x.data<T>() + lo, gy.data<T>() + lo, gx.data<T>() + lo, hi - lo);
        });
      case UnaryOp::kTanh:
        return map_grad<T>(x, y, gy, gx, [](T, T o) { return T(1) - o * o; });
      case UnaryOp::kSigmoid:
        return map_grad<T>(x, y, gy, gx, [](T, T o) { return o * (T(1) - o); });
      case UnaryOp::kExp:
        return map_grad<T>(x, y, gy, gx, [](T, T o) { return o; });
      case UnaryOp::kLog:
        return map_grad<T>(x, y, gy, gx, [](T v, T) { return T(1) / v; });
      case UnaryOp::kSqrt:
        return map_grad<T>(x, y, gy, gx, [](T, T o) { return T(0.5) / o; });
      case UnaryOp::kAbs:
        return map_grad<T>(x, y, gy, gx, [](T v, T) {
          return static_cast<T>(v > T(0)) - static_cast<T>(v < T(0));
        });
      case UnaryOp::kPow:
        return map_grad<T>(x, y, gy, gx, [al](T v, T) { return al * std::pow(v, al - T(1)); });
      case UnaryOp::kAddScalar:
        return map_grad<T>(x, y, gy, gx, [](T, T) { return T(1); });
      case UnaryOp::kMulScalar:
        return map_grad<T>(x, y, gy, gx, [al](T, T) { return al; });
    }
  });
}

}  // namespace

// ---- cast ------------------------------------------------------------------

void cast_cpu(const Tensor& x, Tensor& out) {
  const int64_t n = x.numel();
  // ops::cast checked both dtypes are float-like.
  dispatch_floating_16(x.dtype(), "cast", [&](auto zx) {
    using X = decltype(zx);
    dispatch_floating_16(out.dtype(), "cast", [&](auto zo) {
      using O = decltype(zo);
      const X* src = x.data<X>();
      O* dst = out.data<O>();
      parallel_for(0, n, 1 << 16, [&](int64_t lo, int64_t hi) {
        if constexpr (std::is_same_v<X, double> && std::is_same_v<O, double>)
          std::copy(src + lo, src + hi, dst + lo);
        else if constexpr (std::is_same_v<X, double> || std::is_same_v<O, double>)
          for (int64_t i = lo; i < hi; ++i) {
            // float64 <-> 16-bit goes through float32: round once to float32,
            // then once more (documented; float64 is for gradient checks).
            if constexpr (std::is_same_v<X, double>)
              store_float(dst, i, static_cast<float>(src[i]));
            else
              dst[i] = static_cast<double>(load_float(src, i));
          }
        else
          for (int64_t i = lo; i < hi; ++i) store_float(dst, i, load_float(src, i));
      });
    });
  });
}

// Gradient sums (core/autograd.cc), at this level's vector width: 16-bit
// elements through load_float / store_float, the scalar conversions, which
// the compiler vectorises here as core's baseline build cannot (W2's bf16
// step on an Intel Xeon summed its gradients 8 elements at a time there).
void accumulate_cpu(Tensor& dst, const Tensor& src) {
  dispatch_floating_16(dst.dtype(), "gradient accumulation", [&](auto z) {
    using T = decltype(z);
    T* d = dst.data<T>();
    const T* s = src.data<T>();
    parallel_for(0, dst.numel(), 1 << 15, [&](int64_t lo, int64_t hi) {
      if constexpr (is_16bit_v<T>)
        for (int64_t i = lo; i < hi; ++i) store_float(d, i, load_float(d, i) + load_float(s, i));
      else
        for (int64_t i = lo; i < hi; ++i) d[i] += s[i];
    });
  });
}

GPIPE_ISA_KERNEL(cast_into, cast_cpu);
GPIPE_ISA_KERNEL(accumulate_into, accumulate_cpu);
GPIPE_ISA_KERNEL(binary_elementwise, binary_cpu);
GPIPE_ISA_KERNEL(unary_elementwise, unary_cpu);
GPIPE_ISA_KERNEL(unary_backward, unary_backward_cpu);

}  // namespace gpipe::ops::cpu::GPIPE_ISA_NS
