// Fused LayerNorm CUDA kernels over rows of length D (the last axis), the
// formulas of ops/cpu/layer_norm.cc.
//
// Forward and the input gradient: a row group per row (a warp for
// D <= 1024, else the block); the row statistics and the two backward dot
// products are double-precision group reductions.
// Parameter gradients, deterministically and without atomics: pass 1 cuts
// the rows into a number of chunks fixed by the shape; block (column tile,
// chunk) sums g * xhat and g over its rows for 32 columns (8 row lanes per
// column, then the 8 lane sums in lane order) and writes one double partial
// per (chunk, column); pass 2 adds the partials of each column in chunk
// order. The result is identical from run to run and launch to launch.
#include "ops/cuda/common.cuh"
#include "ops/layer_norm_kernels.h"

namespace gpipe::ops::cuda {
namespace {

template <class T>
const T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}
template <class T>
T* mutable_or_null(Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// T: the element type of x, y, g and gx; P: gamma's and beta's (T, or
// float32 beside a 16-bit T); C = compute_t<T>: the statistics' and the
// parameter gradients' type (float32 for 16-bit T, Note [Mixed precision]).
template <class T, class P, int kGroup, class C = compute_t<T>>
__global__ void forward_kernel(const T* x, const P* gamma, const P* beta, double eps, T* y, C* mean,
                               C* rstd, int64_t rows, int64_t d) {
  __shared__ double shared[32];
  const int lane = threadIdx.x % kGroup;
  GPIPE_ROW_LOOP(r, rows, kGroup) {
    const T* xr = x + r * d;
    T* yr = y + r * d;
    double s = 0;
    for (int64_t k = lane; k < d; k += kGroup) s += static_cast<double>(load(xr, k));
    const C m = static_cast<C>(group_sum<kGroup>(s, shared) / static_cast<double>(d));
    double v = 0;
    for (int64_t k = lane; k < d; k += kGroup) {
      const double c = static_cast<double>(load(xr, k) - m);
      v += c * c;
    }
    v = group_sum<kGroup>(v, shared) / static_cast<double>(d);
    const C rs = static_cast<C>(1.0 / sqrt(v + eps));
    if (lane == 0) {
      mean[r] = m;
      rstd[r] = rs;
    }
    for (int64_t k = lane; k < d; k += kGroup) {
      C val = (load(xr, k) - m) * rs;
      if (gamma) val *= static_cast<C>(load(gamma, k));
      if (beta) val += static_cast<C>(load(beta, k));
      store(yr, k, val);
    }
  }
}

template <class T, class P, int kGroup, class C = compute_t<T>>
__global__ void input_grad_kernel(const T* g, const T* x, const C* mean, const C* rstd,
                                  const P* gamma, T* gx, int64_t rows, int64_t d) {
  __shared__ double shared[32];
  const int lane = threadIdx.x % kGroup;
  GPIPE_ROW_LOOP(r, rows, kGroup) {
    const T* gr = g + r * d;
    const T* xr = x + r * d;
    const C m = mean[r], rs = rstd[r];
    double sa = 0, sb = 0;
    for (int64_t k = lane; k < d; k += kGroup) {
      const C dh = gamma ? load(gr, k) * static_cast<C>(load(gamma, k)) : load(gr, k);
      sa += static_cast<double>(dh);
      sb += static_cast<double>(dh) * static_cast<double>(load(xr, k) - m);
    }
    sa = group_sum<kGroup>(sa, shared);
    sb = group_sum<kGroup>(sb, shared);
    const C ma = static_cast<C>(sa / static_cast<double>(d));
    const C mb = static_cast<C>(sb * static_cast<double>(rs) / static_cast<double>(d));
    for (int64_t k = lane; k < d; k += kGroup) {
      const C dh = gamma ? load(gr, k) * static_cast<C>(load(gamma, k)) : load(gr, k);
      store(gx, r * d + k, rs * (dh - ma - (load(xr, k) - m) * (rs * mb)));
    }
  }
}

constexpr int kTileCols = 32;  // columns per block in the parameter-gradient pass
constexpr int kRowLanes = 8;   // row lanes per column (blockDim = 32 x 8)
constexpr int64_t kRowsPerChunk = 64;
constexpr int64_t kMaxChunks = 1024;

// Pass 1: block (column tile, chunk) -> partial sums of g * xhat and g.
template <class T, class C = compute_t<T>>
__global__ void param_partials_kernel(const T* g, const T* x, const C* mean, const C* rstd,
                                      int64_t rows, int64_t d, int64_t chunks, double* pg,
                                      double* pb) {
  __shared__ double sg[kRowLanes][kTileCols];
  __shared__ double sb[kRowLanes][kTileCols];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kTileCols + threadIdx.x;
  const int64_t c = blockIdx.y;
  const int64_t r0 = c * rows / chunks, r1 = (c + 1) * rows / chunks;
  double ag = 0, ab = 0;
  if (col < d) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kRowLanes) {
      const C gv = load(g, r * d + col);
      ag +=
          static_cast<double>(gv) * static_cast<double>((load(x, r * d + col) - mean[r]) * rstd[r]);
      ab += static_cast<double>(gv);
    }
  }
  sg[threadIdx.y][threadIdx.x] = ag;
  sb[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y == 0 && col < d) {
    double tg = 0, tb = 0;
    for (int lane = 0; lane < kRowLanes; ++lane) {  // fixed order
      tg += sg[lane][threadIdx.x];
      tb += sb[lane][threadIdx.x];
    }
    pg[c * d + col] = tg;
    pb[c * d + col] = tb;
  }
}

// Pass 2: each column adds its partials in chunk order.
template <class T>
__global__ void param_finish_kernel(const double* pg, const double* pb, int64_t d, int64_t chunks,
                                    T* ggamma, T* gbeta) {
  GPIPE_KERNEL_LOOP(col, d) {
    double tg = 0, tb = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      tg += pg[c * d + col];
      tb += pb[c * d + col];
    }
    if (ggamma) ggamma[col] = static_cast<T>(tg);
    if (gbeta) gbeta[col] = static_cast<T>(tb);
  }
}

// Calls f(P{}) with gamma's and beta's element type: float32 beside a
// 16-bit input when the parameters are float32, else the input's own.
template <class T, class F>
void with_param_type(const Tensor& gamma, const Tensor& beta, F&& f) {
  if constexpr (is_16bit_v<T>) {
    const Tensor& p = gamma.defined() ? gamma : beta;
    if (p.defined() && p.dtype() == DType::kFloat32) return f(float{});
  }
  f(T{});
}

void layer_norm_forward_cuda(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps,
                             Tensor& y, Tensor& mean, Tensor& rstd) {
  const int64_t d = x.size(-1);
  const int64_t rows = d == 0 ? 0 : x.numel() / d;
  if (rows == 0) return;
  KernelScope scope(y.device());
  dispatch_float_like(x.dtype(), "layer_norm", [&](auto z) {
    using T = decltype(z);
    using C = compute_t<T>;
    with_param_type<T>(gamma, beta, [&](auto zp) {
      using P = decltype(zp);
      if (d <= kWarpRowLimit) {
        forward_kernel<T, P, 32><<<row_blocks<32>(rows), kThreads, 0, scope.stream()>>>(
            x.data<T>(), data_or_null<P>(gamma), data_or_null<P>(beta), eps, y.data<T>(),
            mean.data<C>(), rstd.data<C>(), rows, d);
      } else {
        forward_kernel<T, P, kThreads><<<row_blocks<kThreads>(rows), kThreads, 0, scope.stream()>>>(
            x.data<T>(), data_or_null<P>(gamma), data_or_null<P>(beta), eps, y.data<T>(),
            mean.data<C>(), rstd.data<C>(), rows, d);
      }
    });
  });
  GPIPE_CUDA_CHECK_LAUNCH();
}

void layer_norm_backward_cuda(const Tensor& g, const Tensor& x, const Tensor& mean,
                              const Tensor& rstd, const Tensor& gamma, Tensor& gx, Tensor& ggamma,
                              Tensor& gbeta) {
  const int64_t d = x.size(-1);
  const int64_t rows = d == 0 ? 0 : x.numel() / d;
  const Device device = x.device();
  KernelScope scope(device);
  dispatch_float_like(x.dtype(), "layer_norm backward", [&](auto z) {
    using T = decltype(z);
    using C = compute_t<T>;  // the statistics' and the parameter gradients' type
    C* pgg = mutable_or_null<C>(ggamma);
    C* pgb = mutable_or_null<C>(gbeta);
    if (rows == 0) {
      if (pgg) GPIPE_CUDA_CHECK(cudaMemsetAsync(pgg, 0, ggamma.nbytes(), scope.stream()));
      if (pgb) GPIPE_CUDA_CHECK(cudaMemsetAsync(pgb, 0, gbeta.nbytes(), scope.stream()));
      return;
    }
    if (gx.defined()) {
      with_param_type<T>(gamma, Tensor(), [&](auto zp) {
        using P = decltype(zp);
        if (d <= kWarpRowLimit) {
          input_grad_kernel<T, P, 32><<<row_blocks<32>(rows), kThreads, 0, scope.stream()>>>(
              g.data<T>(), x.data<T>(), mean.data<C>(), rstd.data<C>(), data_or_null<P>(gamma),
              gx.data<T>(), rows, d);
        } else {
          input_grad_kernel<T, P, kThreads>
              <<<row_blocks<kThreads>(rows), kThreads, 0, scope.stream()>>>(
                  g.data<T>(), x.data<T>(), mean.data<C>(), rstd.data<C>(), data_or_null<P>(gamma),
                  gx.data<T>(), rows, d);
        }
      });
      GPIPE_CUDA_CHECK_LAUNCH();
    }
    if (!pgg && !pgb) return;
    const int64_t chunks =
        std::clamp<int64_t>((rows + kRowsPerChunk - 1) / kRowsPerChunk, 1, kMaxChunks);
    Tensor partial = workspace(2 * chunks * d, DType::kFloat64, device);
    double* pg = partial.data<double>();
    double* pb = pg + chunks * d;
    const dim3 grid(static_cast<unsigned>((d + kTileCols - 1) / kTileCols),
                    static_cast<unsigned>(chunks));
    param_partials_kernel<T><<<grid, dim3(kTileCols, kRowLanes), 0, scope.stream()>>>(
        g.data<T>(), x.data<T>(), mean.data<C>(), rstd.data<C>(), rows, d, chunks, pg, pb);
    GPIPE_CUDA_CHECK_LAUNCH();
    param_finish_kernel<C>
        <<<blocks_for(d), kThreads, 0, scope.stream()>>>(pg, pb, d, chunks, pgg, pgb);
    GPIPE_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

GPIPE_REGISTER_KERNEL(layer_norm_forward, DeviceType::kCUDA, layer_norm_forward_cuda);
GPIPE_REGISTER_KERNEL(layer_norm_backward, DeviceType::kCUDA, layer_norm_backward_cuda);
GPIPE_KERNEL_ACCEPTS_16BIT(layer_norm_forward, DeviceType::kCUDA, kBoth);
GPIPE_KERNEL_ACCEPTS_16BIT(layer_norm_backward, DeviceType::kCUDA, kBoth);

}  // namespace gpipe::ops::cuda
