// Softmax / log-softmax CUDA kernels over [outer, n, inner] (see
// ops/softmax_kernels.h), the same formulas as ops/cpu/softmax.cc.
//
// inner == 1 (the last axis): a row group per row (a warp for n <= 1024,
// else the whole block) makes the max and the sum with shuffle reductions
// and writes the row in a third pass. inner > 1: a thread per (outer, inner)
// column walks n with stride inner; neighbouring threads read neighbouring
// columns, so the loads coalesce. Sums run in T (float32 for 16-bit T), as
// on the CPU; exp of an argument below the underflow cutoff is an exact 0,
// also as on the CPU.
#include "ops/cuda/common.cuh"
#include "ops/softmax_kernels.h"

namespace gpipe::ops::cuda {
namespace {

// T is the element type, C = compute_t<T> what the sums run in (float32
// for 16-bit elements, each output rounded once).
template <class T, int kGroup, bool kLog, class C = compute_t<T>>
__global__ void forward_rows(const T* x, T* y, int64_t rows, int64_t n) {
  __shared__ C shared[32];
  const int lane = threadIdx.x % kGroup;
  GPIPE_ROW_LOOP(r, rows, kGroup) {
    const T* xr = x + r * n;
    T* yr = y + r * n;
    C mx = neg_infinity<C>();
    for (int64_t k = lane; k < n; k += kGroup) mx = fmax(mx, load(xr, k));
    mx = group_max<kGroup>(mx, shared);
    C sum = 0;
    if constexpr (kLog) {
      for (int64_t k = lane; k < n; k += kGroup) sum += dexp(load(xr, k) - mx);
      const C lse = mx + dlog(group_sum<kGroup>(sum, shared));
      for (int64_t k = lane; k < n; k += kGroup) store(yr, k, load(xr, k) - lse);
    } else {
      for (int64_t k = lane; k < n; k += kGroup) sum += exp_or_zero(load(xr, k) - mx);
      const C inv = C(1) / group_sum<kGroup>(sum, shared);
      // exp again rather than read back y: a 16-bit y holds rounded values.
      for (int64_t k = lane; k < n; k += kGroup) store(yr, k, exp_or_zero(load(xr, k) - mx) * inv);
    }
  }
}

template <class T, int kGroup, bool kLog, class C = compute_t<T>>
__global__ void backward_rows(const T* y, const T* g, T* gx, int64_t rows, int64_t n) {
  __shared__ C shared[32];
  const int lane = threadIdx.x % kGroup;
  GPIPE_ROW_LOOP(r, rows, kGroup) {
    const T* yr = y + r * n;
    const T* gr = g + r * n;
    T* out = gx + r * n;
    C acc = 0;
    for (int64_t k = lane; k < n; k += kGroup)
      acc += kLog ? load(gr, k) : load(gr, k) * load(yr, k);
    acc = group_sum<kGroup>(acc, shared);
    for (int64_t k = lane; k < n; k += kGroup) {
      const C yk = load(yr, k), gk = load(gr, k);
      store(out, k, kLog ? gk - exp_or_zero(yk) * acc : yk * (gk - acc));
    }
  }
}

template <class T, bool kLog, class C = compute_t<T>>
__global__ void forward_columns(const T* x, T* y, int64_t outer, int64_t n, int64_t inner) {
  GPIPE_KERNEL_LOOP(col, outer * inner) {
    const int64_t o = col / inner, i = col - o * inner;
    const T* xc = x + o * n * inner + i;
    T* yc = y + o * n * inner + i;
    C mx = neg_infinity<C>();
    for (int64_t k = 0; k < n; ++k) mx = fmax(mx, load(xc, k * inner));
    C sum = 0;
    if constexpr (kLog) {
      for (int64_t k = 0; k < n; ++k) sum += dexp(load(xc, k * inner) - mx);
      const C lse = mx + dlog(sum);
      for (int64_t k = 0; k < n; ++k) store(yc, k * inner, load(xc, k * inner) - lse);
    } else {
      for (int64_t k = 0; k < n; ++k) sum += exp_or_zero(load(xc, k * inner) - mx);
      const C inv = C(1) / sum;
      for (int64_t k = 0; k < n; ++k)
        store(yc, k * inner, exp_or_zero(load(xc, k * inner) - mx) * inv);
    }
  }
}

template <class T, bool kLog, class C = compute_t<T>>
__global__ void backward_columns(const T* y, const T* g, T* gx, int64_t outer, int64_t n,
                                 int64_t inner) {
  GPIPE_KERNEL_LOOP(col, outer * inner) {
    const int64_t o = col / inner, i = col - o * inner;
    const int64_t base = o * n * inner + i;
    C acc = 0;
    for (int64_t k = 0; k < n; ++k) {
      const int64_t at = base + k * inner;
      acc += kLog ? load(g, at) : load(g, at) * load(y, at);
    }
    for (int64_t k = 0; k < n; ++k) {
      const int64_t at = base + k * inner;
      const C ya = load(y, at), ga = load(g, at);
      store(gx, at, kLog ? ga - exp_or_zero(ya) * acc : ya * (ga - acc));
    }
  }
}

template <bool kLog>
void forward_cuda(const Tensor& x, int64_t axis, Tensor& y) {
  if (x.numel() == 0) return;
  const AxisView g = axis_view(x.shape(), axis);
  KernelScope scope(y.device());
  dispatch_float_like(x.dtype(), kLog ? "log_softmax" : "softmax", [&](auto z) {
    using T = decltype(z);
    if (g.inner == 1 && g.n <= kWarpRowLimit) {
      forward_rows<T, 32, kLog><<<row_blocks<32>(g.outer), kThreads, 0, scope.stream()>>>(
          x.data<T>(), y.data<T>(), g.outer, g.n);
    } else if (g.inner == 1) {
      forward_rows<T, kThreads, kLog>
          <<<row_blocks<kThreads>(g.outer), kThreads, 0, scope.stream()>>>(x.data<T>(), y.data<T>(),
                                                                           g.outer, g.n);
    } else {
      forward_columns<T, kLog><<<blocks_for(g.outer * g.inner), kThreads, 0, scope.stream()>>>(
          x.data<T>(), y.data<T>(), g.outer, g.n, g.inner);
    }
  });
  GPIPE_CUDA_CHECK_LAUNCH();
}

template <bool kLog>
void backward_cuda(const Tensor& y, const Tensor& gy, int64_t axis, Tensor& gx) {
  if (y.numel() == 0) return;
  const AxisView g = axis_view(y.shape(), axis);
  KernelScope scope(gx.device());
  dispatch_float_like(y.dtype(), kLog ? "log_softmax backward" : "softmax backward", [&](auto z) {
    using T = decltype(z);
    if (g.inner == 1 && g.n <= kWarpRowLimit) {
      backward_rows<T, 32, kLog><<<row_blocks<32>(g.outer), kThreads, 0, scope.stream()>>>(
          y.data<T>(), gy.data<T>(), gx.data<T>(), g.outer, g.n);
    } else if (g.inner == 1) {
      backward_rows<T, kThreads, kLog>
          <<<row_blocks<kThreads>(g.outer), kThreads, 0, scope.stream()>>>(
              y.data<T>(), gy.data<T>(), gx.data<T>(), g.outer, g.n);
    } else {
      backward_columns<T, kLog><<<blocks_for(g.outer * g.inner), kThreads, 0, scope.stream()>>>(
          y.data<T>(), gy.data<T>(), gx.data<T>(), g.outer, g.n, g.inner);
    }
  });
  GPIPE_CUDA_CHECK_LAUNCH();
}

void softmax_cuda(const Tensor& x, int64_t axis, Tensor& y) { forward_cuda<false>(x, axis, y); }
void log_softmax_cuda(const Tensor& x, int64_t axis, Tensor& y) { forward_cuda<true>(x, axis, y); }
void softmax_backward_cuda(const Tensor& y, const Tensor& g, int64_t axis, Tensor& gx) {
  backward_cuda<false>(y, g, axis, gx);
}
void log_softmax_backward_cuda(const Tensor& y, const Tensor& g, int64_t axis, Tensor& gx) {
  backward_cuda<true>(y, g, axis, gx);
}

}  // namespace

GPIPE_REGISTER_KERNEL(softmax_forward, DeviceType::kCUDA, softmax_cuda);
GPIPE_REGISTER_KERNEL(log_softmax_forward, DeviceType::kCUDA, log_softmax_cuda);
GPIPE_REGISTER_KERNEL(softmax_backward, DeviceType::kCUDA, softmax_backward_cuda);
GPIPE_REGISTER_KERNEL(log_softmax_backward, DeviceType::kCUDA, log_softmax_backward_cuda);
GPIPE_KERNEL_ACCEPTS_16BIT(softmax_forward, DeviceType::kCUDA, kBoth);
GPIPE_KERNEL_ACCEPTS_16BIT(log_softmax_forward, DeviceType::kCUDA, kBoth);
GPIPE_KERNEL_ACCEPTS_16BIT(softmax_backward, DeviceType::kCUDA, kBoth);
GPIPE_KERNEL_ACCEPTS_16BIT(log_softmax_backward, DeviceType::kCUDA, kBoth);

}  // namespace gpipe::ops::cuda
