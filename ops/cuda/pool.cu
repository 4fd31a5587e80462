// max_pool2d / avg_pool2d CUDA kernels (NCHW), with the semantics of
// ops/cpu/pool.cc. Hand-written rather than cuDNN: cuDNN pooling returns no
// argmax (the max backward slot consumes one) and clips average windows
// differently from count_include_pad here.
//
// Forward: a thread per output walks its window in row-major order; max
// keeps the first maximal element with a strict '>', and the first NaN wins,
// exactly as the CPU does. Average pooling sums in T in the same order and
// multiplies by 1 / divisor.
// Average backward gathers: a thread per input element adds the outputs
// whose windows cover it, in row-major output order (the CPU's order).
// Max backward: the slot carries no window geometry, so a gather cannot find
// the outputs that may point at an input; a thread per (sample, channel)
// plane scatters that plane's outputs in order instead, race-free and in
// the CPU's order. Parallelism is N x C threads: fine for typical batch x
// channel counts, a known slow spot for few huge planes.
#include "ops/cuda/common.cuh"
#include "ops/pool_kernels.h"

namespace gpipe::ops::cuda {
namespace {

struct Geometry {
  int64_t planes, h, w, oh, ow;
  Pool2dParams p;
};

Geometry geometry(const Shape& in, const Shape& out, const Pool2dParams& p) {
  return Geometry{in[0] * in[1], in[2], in[3], out[2], out[3], p};
}

// The in-bounds part [lo, hi) of a window along one axis and its extent
// inside the padded input (see Span in ops/cpu/pool.cc).
struct Span {
  int64_t lo, hi, padded;
};
__device__ inline Span span(int64_t o, int64_t kernel, int64_t stride, int64_t pad, int64_t size) {
  const int64_t start = o * stride - pad;
  const int64_t end = min(start + kernel, size + pad);
  return Span{max(start, int64_t{0}), min(end, size), end - start};
}

// Outputs [lo, hi] along one axis whose windows contain input position i.
__device__ inline void covering(int64_t i, int64_t kernel, int64_t stride, int64_t pad, int64_t out,
                                int64_t& lo, int64_t& hi) {
  const int64_t first = i + pad - kernel + 1;
  lo = first <= 0 ? 0 : (first + stride - 1) / stride;
  hi = min((i + pad) / stride, out - 1);
}

template <class T>
__global__ void max_forward_kernel(const T* x, Geometry g, T* y, int64_t* argmax) {
  GPIPE_KERNEL_LOOP(e, g.planes * g.oh * g.ow) {
    const int64_t plane = e / (g.oh * g.ow), rq = e - plane * g.oh * g.ow;
    const int64_t r = rq / g.ow, q = rq - r * g.ow;
    const Span rs = span(r, g.p.kernel_h, g.p.stride_h, g.p.pad_h, g.h);
    const Span cs = span(q, g.p.kernel_w, g.p.stride_w, g.p.pad_w, g.w);
    const T* xp = x + plane * g.h * g.w;
    T best = neg_infinity<T>();
    int64_t at = rs.lo * g.w + cs.lo;  // kept if the whole window is -inf
    for (int64_t i = rs.lo; i < rs.hi; ++i) {
      for (int64_t j = cs.lo; j < cs.hi; ++j) {
        const T v = xp[i * g.w + j];
        if (v != v) {  // the first NaN wins
          best = v;
          at = i * g.w + j;
          i = rs.hi;
          break;
        }
        if (v > best) {
          best = v;
          at = i * g.w + j;
        }
      }
    }
    y[e] = best;
    if (argmax) argmax[e] = at;
  }
}

template <class T>
__global__ void max_backward_kernel(const T* gy, const int64_t* argmax, int64_t planes,
                                    int64_t plane_in, int64_t plane_out, T* gx) {
  GPIPE_KERNEL_LOOP(plane, planes) {
    T* gxp = gx + plane * plane_in;
    const T* gyp = gy + plane * plane_out;
    const int64_t* ap = argmax + plane * plane_out;
    for (int64_t e = 0; e < plane_out; ++e) gxp[ap[e]] += gyp[e];
  }
}

template <class T>
__device__ inline T inverse_divisor(const Geometry& g, const Span& rs, const Span& cs) {
  const int64_t count =
      g.p.count_include_pad ? rs.padded * cs.padded : (rs.hi - rs.lo) * (cs.hi - cs.lo);
  return T(1) / static_cast<T>(count);
}

template <class T>
__global__ void avg_forward_kernel(const T* x, Geometry g, T* y) {
  GPIPE_KERNEL_LOOP(e, g.planes * g.oh * g.ow) {
    const int64_t plane = e / (g.oh * g.ow), rq = e - plane * g.oh * g.ow;
    const int64_t r = rq / g.ow, q = rq - r * g.ow;
    const Span rs = span(r, g.p.kernel_h, g.p.stride_h, g.p.pad_h, g.h);
    const Span cs = span(q, g.p.kernel_w, g.p.stride_w, g.p.pad_w, g.w);
    const T* xp = x + plane * g.h * g.w;
    T acc = 0;
    for (int64_t i = rs.lo; i < rs.hi; ++i)
      for (int64_t j = cs.lo; j < cs.hi; ++j) acc += xp[i * g.w + j];
    y[e] = acc * inverse_divisor<T>(g, rs, cs);
  }
}

template <class T>
__global__ void avg_backward_kernel(const T* gy, Geometry g, T* gx) {
  GPIPE_KERNEL_LOOP(e, g.planes * g.h * g.w) {
    const int64_t plane = e / (g.h * g.w), ij = e - plane * g.h * g.w;
    const int64_t i = ij / g.w, j = ij - i * g.w;
    int64_t r_lo, r_hi, q_lo, q_hi;
    covering(i, g.p.kernel_h, g.p.stride_h, g.p.pad_h, g.oh, r_lo, r_hi);
    covering(j, g.p.kernel_w, g.p.stride_w, g.p.pad_w, g.ow, q_lo, q_hi);
    const T* gyp = gy + plane * g.oh * g.ow;
    T acc = 0;
    for (int64_t r = r_lo; r <= r_hi; ++r) {
      const Span rs = span(r, g.p.kernel_h, g.p.stride_h, g.p.pad_h, g.h);
      for (int64_t q = q_lo; q <= q_hi; ++q) {
        const Span cs = span(q, g.p.kernel_w, g.p.stride_w, g.p.pad_w, g.w);
        acc += gyp[r * g.ow + q] * inverse_divisor<T>(g, rs, cs);
      }
    }
    gx[e] = acc;
  }
}

void max_pool2d_forward_cuda(const Tensor& x, const Pool2dParams& params, Tensor& y,
                             Tensor& argmax) {
  const Geometry g = geometry(x.shape(), y.shape(), params);
  const int64_t n = y.numel();
  if (n == 0) return;
  KernelScope scope(y.device());
  dispatch_floating(x.dtype(), "max_pool2d", [&](auto z) {
    using T = decltype(z);
    max_forward_kernel<T><<<blocks_for(n), kThreads, 0, scope.stream()>>>(
        x.data<T>(), g, y.data<T>(), argmax.defined() ? argmax.data<int64_t>() : nullptr);
  });
  GPIPE_CUDA_CHECK_LAUNCH();
}

void max_pool2d_backward_cuda(const Tensor& grad_y, const Tensor& argmax, Tensor& grad_x) {
  KernelScope scope(grad_x.device());
  GPIPE_CUDA_CHECK(cudaMemsetAsync(grad_x.raw_data(), 0, grad_x.nbytes(), scope.stream()));
  const int64_t planes = grad_x.size(0) * grad_x.size(1);
  if (planes == 0 || grad_y.numel() == 0) return;
  dispatch_floating(grad_y.dtype(), "max_pool2d backward", [&](auto z) {
    using T = decltype(z);
    max_backward_kernel<T><<<blocks_for(planes, 64), 64, 0, scope.stream()>>>(
        grad_y.data<T>(), argmax.data<int64_t>(), planes, grad_x.size(2) * grad_x.size(3),
        grad_y.size(2) * grad_y.size(3), grad_x.data<T>());
  });
  GPIPE_CUDA_CHECK_LAUNCH();
}

void avg_pool2d_forward_cuda(const Tensor& x, const Pool2dParams& params, Tensor& y) {
  const Geometry g = geometry(x.shape(), y.shape(), params);
  const int64_t n = y.numel();
  if (n == 0) return;
  KernelScope scope(y.device());
  dispatch_floating(x.dtype(), "avg_pool2d", [&](auto z) {
    using T = decltype(z);
    avg_forward_kernel<T>
        <<<blocks_for(n), kThreads, 0, scope.stream()>>>(x.data<T>(), g, y.data<T>());
  });
  GPIPE_CUDA_CHECK_LAUNCH();
}

void avg_pool2d_backward_cuda(const Tensor& grad_y, const Pool2dParams& params, Tensor& grad_x) {
  const Geometry g = geometry(grad_x.shape(), grad_y.shape(), params);
  const int64_t n = grad_x.numel();
  if (n == 0) return;
  KernelScope scope(grad_x.device());
  dispatch_floating(grad_y.dtype(), "avg_pool2d backward", [&](auto z) {
    using T = decltype(z);
    avg_backward_kernel<T>
        <<<blocks_for(n), kThreads, 0, scope.stream()>>>(grad_y.data<T>(), g, grad_x.data<T>());
  });
  GPIPE_CUDA_CHECK_LAUNCH();
}

}  // namespace

GPIPE_REGISTER_KERNEL(max_pool2d_forward, DeviceType::kCUDA, max_pool2d_forward_cuda);
GPIPE_REGISTER_KERNEL(max_pool2d_backward, DeviceType::kCUDA, max_pool2d_backward_cuda);
GPIPE_REGISTER_KERNEL(avg_pool2d_forward, DeviceType::kCUDA, avg_pool2d_forward_cuda);
GPIPE_REGISTER_KERNEL(avg_pool2d_backward, DeviceType::kCUDA, avg_pool2d_backward_cuda);

}  // namespace gpipe::ops::cuda
