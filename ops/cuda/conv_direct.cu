// Direct convolution kernels (see conv_direct.h). Simple and slow on
// purpose: a correctness fallback and a second reference, not the fast path
// (cuDNN is). Accumulation in double for the weight gradient (up to
// N * OH * OW terms per element), in T elsewhere.
#include "ops/cuda/common.cuh"
#include "ops/cuda/conv_direct.h"

namespace gpipe::ops::cuda {
namespace {

struct Geometry {
  int64_t n, c, h, w, o, kh, kw, oh, ow, cg, og;
  Conv2dParams p;
};

Geometry geometry(const Shape& x, const Shape& weight, const Shape& y, const Conv2dParams& p) {
  return Geometry{x[0],
                  x[1],
                  x[2],
                  x[3],
                  weight[0],
                  weight[2],
                  weight[3],
                  y[2],
                  y[3],
                  x[1] / p.groups,
                  weight[0] / p.groups,
                  p};
}

template <class T>
__global__ void forward_kernel(const T* x, const T* w, Geometry g, T* y) {
  GPIPE_KERNEL_LOOP(e, g.n * g.o * g.oh * g.ow) {
    const int64_t q = e % g.ow, r = (e / g.ow) % g.oh, o = (e / (g.ow * g.oh)) % g.o;
    const int64_t s = e / (g.ow * g.oh * g.o);
    const int64_t c0 = (o / g.og) * g.cg;
    T acc = 0;
    for (int64_t cl = 0; cl < g.cg; ++cl) {
      const T* xp = x + (s * g.c + c0 + cl) * g.h * g.w;
      const T* wp = w + (o * g.cg + cl) * g.kh * g.kw;
      for (int64_t i = 0; i < g.kh; ++i) {
        const int64_t ih = r * g.p.stride_h - g.p.pad_h + i * g.p.dilation_h;
        if (ih < 0 || ih >= g.h) continue;
        for (int64_t j = 0; j < g.kw; ++j) {
          const int64_t iw = q * g.p.stride_w - g.p.pad_w + j * g.p.dilation_w;
          if (iw >= 0 && iw < g.w) acc += xp[ih * g.w + iw] * wp[i * g.kw + j];
        }
      }
    }
    y[e] = acc;
  }
}

// Output index along one axis that tap k of an input position reaches, or -1.
__device__ inline int64_t tap_output(int64_t in, int64_t k, int64_t stride, int64_t pad,
                                     int64_t dilation, int64_t out) {
  const int64_t t = in + pad - k * dilation;
  if (t < 0 || t % stride != 0) return -1;
  const int64_t o = t / stride;
  return o < out ? o : -1;
}

template <class T>
__global__ void backward_input_kernel(const T* gy, const T* w, Geometry g, T* gx) {
  GPIPE_KERNEL_LOOP(e, g.n * g.c * g.h * g.w) {
    const int64_t iw = e % g.w, ih = (e / g.w) % g.h, c = (e / (g.w * g.h)) % g.c;
    const int64_t s = e / (g.w * g.h * g.c);
    const int64_t grp = c / g.cg, cl = c - grp * g.cg;
    T acc = 0;
    for (int64_t ol = 0; ol < g.og; ++ol) {
      const int64_t o = grp * g.og + ol;
      const T* gyp = gy + (s * g.o + o) * g.oh * g.ow;
      const T* wp = w + (o * g.cg + cl) * g.kh * g.kw;
      for (int64_t i = 0; i < g.kh; ++i) {
        const int64_t r = tap_output(ih, i, g.p.stride_h, g.p.pad_h, g.p.dilation_h, g.oh);
        if (r < 0) continue;
        for (int64_t j = 0; j < g.kw; ++j) {
          const int64_t q = tap_output(iw, j, g.p.stride_w, g.p.pad_w, g.p.dilation_w, g.ow);
          if (q >= 0) acc += gyp[r * g.ow + q] * wp[i * g.kw + j];
        }
      }
    }
    gx[e] = acc;
  }
}

template <class T>
__global__ void backward_weight_kernel(const T* gy, const T* x, Geometry g, T* gw) {
  GPIPE_KERNEL_LOOP(e, g.o * g.cg * g.kh * g.kw) {
    const int64_t j = e % g.kw, i = (e / g.kw) % g.kh, cl = (e / (g.kw * g.kh)) % g.cg;
    const int64_t o = e / (g.kw * g.kh * g.cg);
    const int64_t c = (o / g.og) * g.cg + cl;
    double acc = 0;
    for (int64_t s = 0; s < g.n; ++s) {
      const T* gyp = gy + (s * g.o + o) * g.oh * g.ow;
      const T* xp = x + (s * g.c + c) * g.h * g.w;
      for (int64_t r = 0; r < g.oh; ++r) {
        const int64_t ih = r * g.p.stride_h - g.p.pad_h + i * g.p.dilation_h;
        if (ih < 0 || ih >= g.h) continue;
        for (int64_t q = 0; q < g.ow; ++q) {
          const int64_t iw = q * g.p.stride_w - g.p.pad_w + j * g.p.dilation_w;
          if (iw >= 0 && iw < g.w)
            acc += static_cast<double>(gyp[r * g.ow + q]) * static_cast<double>(xp[ih * g.w + iw]);
        }
      }
    }
    gw[e] = static_cast<T>(acc);
  }
}

}  // namespace

void conv2d_direct_forward(const Tensor& x, const Tensor& weight, const Conv2dParams& params,
                           Tensor& y) {
  const Geometry g = geometry(x.shape(), weight.shape(), y.shape(), params);
  if (y.numel() == 0) return;
  KernelScope scope(y.device());
  dispatch_floating(x.dtype(), "conv2d", [&](auto z) {
    using T = decltype(z);
    forward_kernel<T><<<blocks_for(y.numel()), kThreads, 0, scope.stream()>>>(
        x.data<T>(), weight.data<T>(), g, y.data<T>());
  });
  GPIPE_CUDA_CHECK_LAUNCH();
}

void conv2d_direct_backward_input(const Tensor& grad_y, const Tensor& weight,
                                  const Conv2dParams& params, Tensor& grad_x) {
  const Geometry g = geometry(grad_x.shape(), weight.shape(), grad_y.shape(), params);
  if (grad_x.numel() == 0) return;
  KernelScope scope(grad_x.device());
  dispatch_floating(grad_y.dtype(), "conv2d backward", [&](auto z) {
    using T = decltype(z);
    backward_input_kernel<T><<<blocks_for(grad_x.numel()), kThreads, 0, scope.stream()>>>(
        grad_y.data<T>(), weight.data<T>(), g, grad_x.data<T>());
  });
  GPIPE_CUDA_CHECK_LAUNCH();
}

void conv2d_direct_backward_weight(const Tensor& grad_y, const Tensor& x,
                                   const Conv2dParams& params, Tensor& grad_weight) {
  const Geometry g = geometry(x.shape(), grad_weight.shape(), grad_y.shape(), params);
  if (grad_weight.numel() == 0) return;
  KernelScope scope(grad_weight.device());
  dispatch_floating(grad_y.dtype(), "conv2d backward", [&](auto z) {
    using T = decltype(z);
    backward_weight_kernel<T><<<blocks_for(grad_weight.numel()), kThreads, 0, scope.stream()>>>(
        grad_y.data<T>(), x.data<T>(), g, grad_weight.data<T>());
  });
  GPIPE_CUDA_CHECK_LAUNCH();
}

}  // namespace gpipe::ops::cuda
