// Elementwise CUDA kernels, the same formulas as ops/cpu/elementwise.cc.
// Binary ops have a flat path (both operands dense and of the output's
// shape) and a strided path (StridedIndexer per operand, zero strides on
// broadcast axes); unary ops and their gradients are flat maps. The op is a
// template functor, so each (op, dtype) pair is its own tight kernel.
#include <type_traits>

#include "ops/cuda/common.cuh"
#include "ops/elementwise_kernels.h"
#include "runtime/cuda/half.cuh"

namespace gpipe::ops::cuda {
namespace {

// T is the element type; f computes in compute_t<T> (float32 for 16-bit
// elements, which are rounded once on the way out).
template <class T, class F>
__global__ void binary_flat(const T* a, const T* b, T* out, int64_t n, F f) {
  GPIPE_KERNEL_LOOP(i, n) { store(out, i, f(load(a, i), load(b, i))); }
}

template <class T, class F>
__global__ void binary_strided(const T* a, StridedIndexer ai, const T* b, StridedIndexer bi, T* out,
                               int64_t n, F f) {
  GPIPE_KERNEL_LOOP(i, n) { store(out, i, f(load(a, ai(i)), load(b, bi(i)))); }
}

template <class T>
struct AddOp {
  __device__ T operator()(T x, T y) const { return x + y; }
};
template <class T>
struct SubOp {
  __device__ T operator()(T x, T y) const { return x - y; }
};
template <class T>
struct MulOp {
  __device__ T operator()(T x, T y) const { return x * y; }
};
template <class T>
struct DivOp {
  __device__ T operator()(T x, T y) const { return x / y; }
};

template <class T, class F>
void binary_impl(const Tensor& a, const Tensor& b, Tensor& out, F f) {
  const int64_t n = out.numel();
  if (n == 0) return;
  KernelScope scope(out.device());
  if (a.is_contiguous() && b.is_contiguous() && a.shape() == out.shape() &&
      b.shape() == out.shape()) {
    binary_flat<<<blocks_for(n), kThreads, 0, scope.stream()>>>(a.data<T>(), b.data<T>(),
                                                                out.data<T>(), n, f);
  } else {
    const auto idx = make_indexers({&a, &b});
    binary_strided<<<blocks_for(n), kThreads, 0, scope.stream()>>>(
        storage_ptr<const T>(a), idx[0], storage_ptr<const T>(b), idx[1], out.data<T>(), n, f);
  }
  GPIPE_CUDA_CHECK_LAUNCH();
}

void binary_cuda(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  dispatch_float_like(out.dtype(), "elementwise", [&](auto z) {
    using T = decltype(z);
    using C = compute_t<T>;
    switch (op) {
      case BinaryOp::kAdd:
        return binary_impl<T>(a, b, out, AddOp<C>{});
      case BinaryOp::kSub:
        return binary_impl<T>(a, b, out, SubOp<C>{});
      case BinaryOp::kMul:
        return binary_impl<T>(a, b, out, MulOp<C>{});
      case BinaryOp::kDiv:
        return binary_impl<T>(a, b, out, DivOp<C>{});
    }
  });
}

// f(x; alpha) for one op; `op` is uniform across the grid, so the switch does not diverge.
template <class T>
__device__ inline T unary_value(UnaryOp op, T v, T al) {
  switch (op) {
    case UnaryOp::kNeg:
      return -v;
    case UnaryOp::kRelu:
      return v > T(0) ? v : T(0);
    case UnaryOp::kGelu:
      return gelu_fn(v);
    case UnaryOp::kTanh:
      return dtanh(v);
    case UnaryOp::kSigmoid:
      return T(1) / (T(1) + dexp(-v));
    case UnaryOp::kExp:
      return dexp(v);
    case UnaryOp::kLog:
      return dlog(v);
    case UnaryOp::kSqrt:
      return dsqrt(v);
    case UnaryOp::kAbs:
      return dabs(v);
    case UnaryOp::kPow:
      return al == T(2) ? v * v : dpow(v, al);
    case UnaryOp::kAddScalar:
      return v + al;
    case UnaryOp::kMulScalar:
      return v * al;
  }
  return v;
}

// f'(x) given x and y = f(x) (either may be 0 when the front did not pass it).
template <class T>
__device__ inline T unary_derivative(UnaryOp op, T v, T o, T al) {
  switch (op) {
    case UnaryOp::kNeg:
      return T(-1);
    case UnaryOp::kRelu:
      return v > T(0) ? T(1) : T(0);
    case UnaryOp::kGelu:
      return gelu_grad(v);
    case UnaryOp::kTanh:
      return T(1) - o * o;
    case UnaryOp::kSigmoid:
      return o * (T(1) - o);
    case UnaryOp::kExp:
      return o;
    case UnaryOp::kLog:
      return T(1) / v;
    case UnaryOp::kSqrt:
      return T(0.5) / o;
    case UnaryOp::kAbs:
      return v > T(0) ? T(1) : (v < T(0) ? T(-1) : T(0));
    case UnaryOp::kPow:
      return al * dpow(v, al - T(1));
    case UnaryOp::kAddScalar:
      return T(1);
    case UnaryOp::kMulScalar:
      return al;
  }
  return T(0);
}

template <class T, class C = compute_t<T>>
__global__ void unary_kernel(UnaryOp op, C al, const T* x, T* out, int64_t n) {
  GPIPE_KERNEL_LOOP(i, n) { store(out, i, unary_value(op, load(x, i), al)); }
}

template <class T, class C = compute_t<T>>
__global__ void unary_backward_kernel(UnaryOp op, C al, const T* x, const T* y, const T* gy, T* gx,
                                      int64_t n) {
  GPIPE_KERNEL_LOOP(i, n) {
    store(gx, i,
          load(gy, i) * unary_derivative(op, x ? load(x, i) : C(0), y ? load(y, i) : C(0), al));
  }
}

void unary_cuda(UnaryOp op, double alpha, const Tensor& x, Tensor& out) {
  const int64_t n = x.numel();
  if (n == 0) return;
  KernelScope scope(out.device());
  dispatch_float_like(x.dtype(), "elementwise", [&](auto z) {
    using T = decltype(z);
    unary_kernel<T><<<blocks_for(n), kThreads, 0, scope.stream()>>>(
        op, static_cast<compute_t<T>>(alpha), x.data<T>(), out.data<T>(), n);
  });
  GPIPE_CUDA_CHECK_LAUNCH();
}

void unary_backward_cuda(UnaryOp op, double alpha, const Tensor& x, const Tensor& y,
                         const Tensor& gy, Tensor& gx) {
  const int64_t n = gy.numel();
  if (n == 0) return;
  KernelScope scope(gx.device());
  dispatch_float_like(gy.dtype(), "elementwise backward", [&](auto z) {
    using T = decltype(z);
    unary_backward_kernel<T><<<blocks_for(n), kThreads, 0, scope.stream()>>>(
        op, static_cast<compute_t<T>>(alpha), x.defined() ? x.data<T>() : nullptr,
        y.defined() ? y.data<T>() : nullptr, gy.data<T>(), gx.data<T>(), n);
  });
  GPIPE_CUDA_CHECK_LAUNCH();
}

}  // namespace

// ---- cast: the CPU's bit-level roundings (runtime/cuda/half.cuh) ----

using gpipe::cuda::cast_load;
using gpipe::cuda::cast_store;

template <class X, class O>
__global__ void cast_kernel(const X* x, O* out, int64_t n) {
  GPIPE_KERNEL_LOOP(i, n) {
    if constexpr (std::is_same_v<X, double> && std::is_same_v<O, double>)
      out[i] = x[i];
    else if constexpr (std::is_same_v<X, double>)
      cast_store(out, i, static_cast<float>(x[i]));  // through float32, as on the CPU
    else if constexpr (std::is_same_v<O, double>)
      out[i] = static_cast<double>(cast_load(x, i));
    else
      cast_store(out, i, cast_load(x, i));
  }
}

void cast_cuda(const Tensor& x, Tensor& out) {
  const int64_t n = x.numel();
  if (n == 0) return;
  KernelScope scope(out.device());
  dispatch_float_like(x.dtype(), "cast", [&](auto zx) {
    dispatch_float_like(out.dtype(), "cast", [&](auto zo) {
      using X = decltype(zx);
      using O = decltype(zo);
      cast_kernel<<<blocks_for(n), kThreads, 0, scope.stream()>>>(x.data<X>(), out.data<O>(), n);
    });
  });
  GPIPE_CUDA_CHECK_LAUNCH();
}

GPIPE_REGISTER_KERNEL(cast_into, DeviceType::kCUDA, cast_cuda);
GPIPE_KERNEL_ACCEPTS_16BIT(cast_into, DeviceType::kCUDA, kBoth);
GPIPE_REGISTER_KERNEL(binary_elementwise, DeviceType::kCUDA, binary_cuda);
GPIPE_REGISTER_KERNEL(unary_elementwise, DeviceType::kCUDA, unary_cuda);
GPIPE_REGISTER_KERNEL(unary_backward, DeviceType::kCUDA, unary_backward_cuda);
// 16-bit elements are loaded as float32 and rounded once on the way out,
// what the CPU's float32 kernels on widened copies compute.
GPIPE_KERNEL_ACCEPTS_16BIT(binary_elementwise, DeviceType::kCUDA, kBoth);
GPIPE_KERNEL_ACCEPTS_16BIT(unary_elementwise, DeviceType::kCUDA, kBoth);
GPIPE_KERNEL_ACCEPTS_16BIT(unary_backward, DeviceType::kCUDA, kBoth);

}  // namespace gpipe::ops::cuda
