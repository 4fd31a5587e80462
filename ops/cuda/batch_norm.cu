// Batch normalisation CUDA kernels over [N, C, S] (S = product of the
// trailing axes), the formulas of ops/cpu/batch_norm.cc. Hand-written, not
// cuDNN: the slots split statistics, normalisation and the running-stat
// update (cuDNN fuses them), and per-channel reductions here are
// deterministic (ops/cuda/channel_reduce.cuh), in double, like the CPU's.
//
// Every per-channel quantity (mean, variance, the affine coefficients) is a
// small kernel over C; the normalisation and grad_x are then one
// elementwise pass out = a[c] * u + b[c] * v + d[c], as on the CPU.
#include "ops/batch_norm_kernels.h"
#include "ops/cuda/channel_reduce.cuh"

namespace gpipe::ops::cuda {
namespace {

ChannelLayout layout_of(const Tensor& x) {
  const int64_t n = x.size(0), c = x.size(1);
  return ChannelLayout{n, c, n * c == 0 ? 0 : x.numel() / (n * c)};
}

double inverse_count(const ChannelLayout& l) {
  return l.n * l.s > 0 ? 1.0 / static_cast<double>(l.n * l.s) : 0.0;
}

// f(e, c) = (x[e] - sum_x[c] * inv_count)^2: squared deviation from the double-precision mean.
template <class T>
struct SquaredDeviation {
  const T* x;
  const double* sum_x;
  double inv_count;
  __device__ double operator()(int64_t e, int64_t c) const {
    const double d = static_cast<double>(x[e]) - sum_x[c] * inv_count;
    return d * d;
  }
};

// f(e, c) = gy[e] * (x[e] - mean[c]).
template <class T>
struct GradTimesCentered {
  const T* gy;
  const T* x;
  const T* mean;
  __device__ double operator()(int64_t e, int64_t c) const {
    return static_cast<double>(gy[e]) * (static_cast<double>(x[e]) - static_cast<double>(mean[c]));
  }
};

template <class T>
__global__ void stats_finish_kernel(const double* sum_x, const double* sum_sq, int64_t c,
                                    double inv_count, T* mean, T* var) {
  GPIPE_KERNEL_LOOP(k, c) {
    mean[k] = static_cast<T>(sum_x[k] * inv_count);
    var[k] = static_cast<T>(sum_sq[k] * inv_count);
  }
}

// out[e] = a[c] * u[e] + b[c] * v[e] + d[c] for the channel c of e (v may be null).
template <class T>
__global__ void affine_kernel(ChannelLayout l, const T* u, const T* v, const T* a, const T* b,
                              const T* d, T* out) {
  GPIPE_KERNEL_LOOP(e, l.n * l.c * l.s) {
    const int64_t c = (e / l.s) % l.c;
    out[e] = v ? a[c] * u[e] + b[c] * v[e] + d[c] : a[c] * u[e] + d[c];
  }
}

// Forward coefficients: a = gamma * invstd, d = beta - mean * a (double, then T).
template <class T>
__global__ void forward_coefficients_kernel(const T* mean, const T* var, const T* gamma,
                                            const T* beta, double eps, int64_t c, T* a, T* d) {
  GPIPE_KERNEL_LOOP(k, c) {
    const double s =
        (gamma ? static_cast<double>(gamma[k]) : 1.0) / sqrt(static_cast<double>(var[k]) + eps);
    a[k] = static_cast<T>(s);
    d[k] = static_cast<T>((beta ? static_cast<double>(beta[k]) : 0.0) -
                          static_cast<double>(mean[k]) * s);
  }
}

// Backward coefficients and parameter gradients (see the CPU file's comment).
template <class T>
__global__ void backward_coefficients_kernel(const double* sum_gy, const double* sum_gy_xc,
                                             const T* mean, const T* var, const T* gamma,
                                             double eps, bool training, double inv_count, int64_t c,
                                             T* a, T* b, T* d, T* grad_gamma, T* grad_beta) {
  GPIPE_KERNEL_LOOP(k, c) {
    const double invstd = 1.0 / sqrt(static_cast<double>(var[k]) + eps);
    const double sgx = sum_gy_xc ? sum_gy_xc[k] * invstd : 0.0;  // sum(gy * xhat)
    if (grad_beta) grad_beta[k] = static_cast<T>(sum_gy[k]);
    if (grad_gamma) grad_gamma[k] = static_cast<T>(sgx);
    if (!a) continue;
    const double s = (gamma ? static_cast<double>(gamma[k]) : 1.0) * invstd;
    a[k] = static_cast<T>(s);
    if (training) {
      const double bx = -s * invstd * sgx * inv_count;
      b[k] = static_cast<T>(bx);
      d[k] = static_cast<T>(-s * sum_gy[k] * inv_count - bx * static_cast<double>(mean[k]));
    } else {
      b[k] = T(0);
      d[k] = T(0);
    }
  }
}

template <class T>
__global__ void running_stats_kernel(const T* bm, const T* bv, double momentum, double unbias,
                                     int64_t c, T* rm, T* rv) {
  GPIPE_KERNEL_LOOP(k, c) {
    const double keep = 1.0 - momentum;
    rm[k] = static_cast<T>(keep * rm[k] + momentum * bm[k]);
    rv[k] = static_cast<T>(keep * rv[k] + momentum * unbias * bv[k]);
  }
}

void batch_norm_stats_cuda(const Tensor& x, Tensor& mean, Tensor& var) {
  const ChannelLayout l = layout_of(x);
  if (l.c == 0) return;
  KernelScope scope(mean.device());
  dispatch_floating(x.dtype(), "batch_norm", [&](auto z) {
    using T = decltype(z);
    Tensor sums = workspace(2 * l.c, DType::kFloat64, x.device());
    double* sum_x = sums.data<double>();
    double* sum_sq = sum_x + l.c;
    const double inv = inverse_count(l);
    channel_sums(l, x.device(), scope.stream(), ValueTerm<T>{x.data<T>()}, sum_x);
    channel_sums(l, x.device(), scope.stream(), SquaredDeviation<T>{x.data<T>(), sum_x, inv},
                 sum_sq);
    stats_finish_kernel<T><<<blocks_for(l.c), kThreads, 0, scope.stream()>>>(
        sum_x, sum_sq, l.c, inv, mean.data<T>(), var.data<T>());
    GPIPE_CUDA_CHECK_LAUNCH();
  });
}

void batch_norm_forward_cuda(const Tensor& x, const Tensor& mean, const Tensor& var,
                             const Tensor& gamma, const Tensor& beta, double eps, Tensor& y) {
  const ChannelLayout l = layout_of(x);
  if (x.numel() == 0) return;
  KernelScope scope(y.device());
  dispatch_floating(x.dtype(), "batch_norm", [&](auto z) {
    using T = decltype(z);
    Tensor coef = workspace(2 * l.c, x.dtype(), x.device());
    T* a = coef.data<T>();
    T* d = a + l.c;
    forward_coefficients_kernel<T><<<blocks_for(l.c), kThreads, 0, scope.stream()>>>(
        mean.data<T>(), var.data<T>(), gamma.defined() ? gamma.data<T>() : nullptr,
        beta.defined() ? beta.data<T>() : nullptr, eps, l.c, a, d);
    GPIPE_CUDA_CHECK_LAUNCH();
    affine_kernel<T><<<blocks_for(x.numel()), kThreads, 0, scope.stream()>>>(
        l, x.data<T>(), nullptr, a, nullptr, d, y.data<T>());
    GPIPE_CUDA_CHECK_LAUNCH();
  });
}

void batch_norm_backward_cuda(const Tensor& grad_y, const Tensor& x, const Tensor& mean,
                              const Tensor& var, const Tensor& gamma, double eps, bool training,
                              Tensor& grad_x, Tensor& grad_gamma, Tensor& grad_beta) {
  const ChannelLayout l = layout_of(x);
  if (l.c == 0) return;
  KernelScope scope(x.device());
  dispatch_floating(x.dtype(), "batch_norm backward", [&](auto z) {
    using T = decltype(z);
    const T* gy = grad_y.data<T>();
    const T* xp = x.data<T>();
    const bool need_sums = training && grad_x.defined();
    Tensor sums = workspace(2 * l.c, DType::kFloat64, x.device());
    double* sum_gy = sums.data<double>();
    double* sum_gy_xc = sum_gy + l.c;
    GPIPE_CUDA_CHECK(cudaMemsetAsync(sum_gy, 0, sums.nbytes(), scope.stream()));
    if (need_sums || grad_beta.defined())
      channel_sums(l, x.device(), scope.stream(), ValueTerm<T>{gy}, sum_gy);
    const bool want_xc = need_sums || grad_gamma.defined();
    if (want_xc)
      channel_sums(l, x.device(), scope.stream(), GradTimesCentered<T>{gy, xp, mean.data<T>()},
                   sum_gy_xc);
    Tensor coef = grad_x.defined() ? workspace(3 * l.c, x.dtype(), x.device()) : Tensor();
    T* a = grad_x.defined() ? coef.data<T>() : nullptr;
    backward_coefficients_kernel<T><<<blocks_for(l.c), kThreads, 0, scope.stream()>>>(
        sum_gy, want_xc ? sum_gy_xc : nullptr, mean.data<T>(), var.data<T>(),
        gamma.defined() ? gamma.data<T>() : nullptr, eps, training, inverse_count(l), l.c, a,
        a ? a + l.c : nullptr, a ? a + 2 * l.c : nullptr,
        grad_gamma.defined() ? grad_gamma.data<T>() : nullptr,
        grad_beta.defined() ? grad_beta.data<T>() : nullptr);
    GPIPE_CUDA_CHECK_LAUNCH();
    if (!grad_x.defined() || x.numel() == 0) return;
    affine_kernel<T><<<blocks_for(x.numel()), kThreads, 0, scope.stream()>>>(
        l, gy, training ? xp : nullptr, a, a + l.c, a + 2 * l.c, grad_x.data<T>());
    GPIPE_CUDA_CHECK_LAUNCH();
  });
}

void batch_norm_update_running_stats_cuda(const Tensor& batch_mean, const Tensor& batch_var,
                                          double momentum, double unbias, Tensor& running_mean,
                                          Tensor& running_var) {
  const int64_t c = running_mean.numel();
  if (c == 0) return;
  KernelScope scope(running_mean.device());
  dispatch_floating(running_mean.dtype(), "update_running_stats", [&](auto z) {
    using T = decltype(z);
    running_stats_kernel<T><<<blocks_for(c), kThreads, 0, scope.stream()>>>(
        batch_mean.data<T>(), batch_var.data<T>(), momentum, unbias, c, running_mean.data<T>(),
        running_var.data<T>());
  });
  GPIPE_CUDA_CHECK_LAUNCH();
}

}  // namespace

GPIPE_REGISTER_KERNEL(batch_norm_stats, DeviceType::kCUDA, batch_norm_stats_cuda);
GPIPE_REGISTER_KERNEL(batch_norm_forward, DeviceType::kCUDA, batch_norm_forward_cuda);
GPIPE_REGISTER_KERNEL(batch_norm_backward, DeviceType::kCUDA, batch_norm_backward_cuda);
GPIPE_REGISTER_KERNEL(batch_norm_update_running_stats, DeviceType::kCUDA,
                      batch_norm_update_running_stats_cuda);

}  // namespace gpipe::ops::cuda
