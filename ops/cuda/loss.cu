// Cross-entropy CUDA kernels (see ops/loss_kernels.h), the formulas of
// ops/cpu/loss.cc.
//
// Forward: a validation kernel finds the first bad target (atomicMin on its
// position) and counts the rows that are not ignored (an integer atomicAdd:
// exact); the host reads both back, as the CPU contract requires throwing
// before any output is written. A row group per row then computes the
// log-sum-exp and the row's (smoothed) loss in double; one block adds the
// row losses in a fixed order and divides by the count.
// Backward: the count is recomputed on the device (no host round trip) and
// one thread per logit writes (softmax - smoothed one-hot) * g / count. It
// trusts the targets the forward validated; an out-of-range target is
// treated like an ignored row instead of being written out of bounds.
#include "ops/cuda/common.cuh"
#include "ops/loss_kernels.h"

namespace gpipe::ops::cuda {
namespace {

// stats[0] = first bad row (n if none), stats[1] = rows not ignored.
__global__ void init_stats_kernel(unsigned long long* stats, unsigned long long n) {
  stats[0] = n;
  stats[1] = 0;
}

template <class I>
__global__ void target_stats_kernel(const I* t, int64_t n, int64_t c, int64_t ignore_index,
                                    unsigned long long* stats) {
  GPIPE_KERNEL_LOOP(i, n) {
    const int64_t v = static_cast<int64_t>(t[i]);
    if (v == ignore_index) continue;
    if (v < 0 || v >= c) {
      atomicMin(stats, static_cast<unsigned long long>(i));
    } else {
      atomicAdd(stats + 1, 1ull);
    }
  }
}

// T: the logits' element type; C = compute_t<T>: the loss's, the
// log-sum-exps' and the upstream gradient's (float32 for 16-bit logits).
template <class T, class I, int kGroup, class C = compute_t<T>>
__global__ void row_loss_kernel(const T* x, const I* targets, int64_t n, int64_t c,
                                int64_t ignore_index, double eps, C* lse, double* row_loss) {
  __shared__ double shared[32];
  __shared__ C shared_t[32];
  const int lane = threadIdx.x % kGroup;
  GPIPE_ROW_LOOP(i, n, kGroup) {
    const T* xr = x + i * c;
    C mx = neg_infinity<C>();
    for (int64_t j = lane; j < c; j += kGroup) mx = fmax(mx, load(xr, j));
    mx = group_max<kGroup>(mx, shared_t);
    double s = 0, sx = 0;
    for (int64_t j = lane; j < c; j += kGroup) {
      const C xj = load(xr, j);
      s += static_cast<double>(dexp(xj - mx));
      sx += static_cast<double>(xj);
    }
    s = group_sum<kGroup>(s, shared);
    if (eps != 0.0) sx = group_sum<kGroup>(sx, shared);
    if (lane == 0) {
      const double l = static_cast<double>(mx) + log(s);
      lse[i] = static_cast<C>(l);
      const int64_t t = static_cast<int64_t>(targets[i]);
      double li = 0;
      if (t != ignore_index && t >= 0 && t < c) {
        li = (1.0 - eps) * (l - static_cast<double>(load(xr, t)));
        if (eps != 0.0) li += eps * (l - sx / static_cast<double>(c));
      }
      row_loss[i] = li;
    }
  }
}

template <class T>
__global__ void mean_loss_kernel(const double* row_loss, int64_t n, const unsigned long long* stats,
                                 T* loss) {
  __shared__ double shared[32];
  double acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += row_loss[i];
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) {
    const unsigned long long count = stats[1];
    loss[0] = static_cast<T>(count > 0 ? acc / static_cast<double>(count) : 0.0);
  }
}

template <class T, class I, class C = compute_t<T>>
__global__ void grad_kernel(const T* x, const I* targets, const C* lse, const C* g,
                            const unsigned long long* stats, int64_t n, int64_t c,
                            int64_t ignore_index, double eps, T* gx) {
  const unsigned long long count = stats[1];
  const C scale = count > 0 ? static_cast<C>(static_cast<double>(g[0]) / count) : C(0);
  const C off = static_cast<C>(eps / c);
  const C hit = static_cast<C>(1.0 - eps);
  GPIPE_KERNEL_LOOP(e, n * c) {
    const int64_t i = e / c, j = e - i * c;
    const int64_t t = static_cast<int64_t>(targets[i]);
    if (count == 0 || t == ignore_index || t < 0 || t >= c) {
      store(gx, e, C(0));
      continue;
    }
    const C d = load(x, e) - lse[i];
    C v = ((d < exp_cutoff<C>() ? C(0) : dexp(d)) - off) * scale;
    if (j == t) v -= hit * scale;
    store(gx, e, v);
  }
}

template <class I>
void launch_stats(const Tensor& targets, int64_t n, int64_t c, int64_t ignore_index,
                  unsigned long long* stats, cudaStream_t stream) {
  init_stats_kernel<<<1, 1, 0, stream>>>(stats, static_cast<unsigned long long>(n));
  if (n > 0)
    target_stats_kernel<I>
        <<<blocks_for(n), kThreads, 0, stream>>>(targets.data<I>(), n, c, ignore_index, stats);
  GPIPE_CUDA_CHECK_LAUNCH();
}

void cross_entropy_forward_cuda(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                                double label_smoothing, Tensor& loss, Tensor& lse) {
  KernelScope scope(loss.device());
  dispatch_float_like(logits.dtype(), "cross_entropy", [&](auto z) {
    using T = decltype(z);
    using C = compute_t<T>;
    dispatch_index(targets.dtype(), "cross_entropy", [&](auto zi) {
      using I = decltype(zi);
      const int64_t c = logits.size(-1), n = c == 0 ? 0 : logits.numel() / c;
      Tensor stats_t = workspace(2, DType::kInt64, loss.device());
      auto* stats = static_cast<unsigned long long*>(stats_t.raw_data());
      launch_stats<I>(targets, n, c, ignore_index, stats, scope.stream());
      unsigned long long host[2];
      GPIPE_CUDA_CHECK(
          cudaMemcpyAsync(host, stats, sizeof(host), cudaMemcpyDeviceToHost, scope.stream()));
      GPIPE_CUDA_CHECK(cudaStreamSynchronize(scope.stream()));
      if (static_cast<int64_t>(host[0]) < n) {
        const int64_t i = static_cast<int64_t>(host[0]);
        const int64_t v =
            static_cast<int64_t>(read_device_value<I>(targets.data<I>() + i, scope.stream()));
        throw Error(detail::concat("cross_entropy: target ", v, " at position ", i,
                                   " is out of range for C = ", c, " classes (valid: 0 .. ", c - 1,
                                   ", or ignore_index = ", ignore_index, ")"));
      }
      Tensor row_loss = workspace(std::max<int64_t>(n, 1), DType::kFloat64, loss.device());
      if (n > 0) {
        if (c <= kWarpRowLimit) {
          row_loss_kernel<T, I, 32><<<row_blocks<32>(n), kThreads, 0, scope.stream()>>>(
              logits.data<T>(), targets.data<I>(), n, c, ignore_index, label_smoothing,
              lse.data<C>(), row_loss.data<double>());
        } else {
          row_loss_kernel<T, I, kThreads><<<row_blocks<kThreads>(n), kThreads, 0, scope.stream()>>>(
              logits.data<T>(), targets.data<I>(), n, c, ignore_index, label_smoothing,
              lse.data<C>(), row_loss.data<double>());
        }
        GPIPE_CUDA_CHECK_LAUNCH();
      }
      mean_loss_kernel<C>
          <<<1, 1024, 0, scope.stream()>>>(row_loss.data<double>(), n, stats, loss.data<C>());
      GPIPE_CUDA_CHECK_LAUNCH();
    });
  });
}

void cross_entropy_backward_cuda(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                 const Tensor& g, int64_t ignore_index, double label_smoothing,
                                 Tensor& gx) {
  KernelScope scope(gx.device());
  dispatch_float_like(logits.dtype(), "cross_entropy backward", [&](auto z) {
    using T = decltype(z);
    using C = compute_t<T>;
    dispatch_index(targets.dtype(), "cross_entropy backward", [&](auto zi) {
      using I = decltype(zi);
      const int64_t c = logits.size(-1), n = c == 0 ? 0 : logits.numel() / c;
      if (n * c == 0) return;
      Tensor stats_t = workspace(2, DType::kInt64, gx.device());
      auto* stats = static_cast<unsigned long long*>(stats_t.raw_data());
      launch_stats<I>(targets, n, c, ignore_index, stats, scope.stream());
      grad_kernel<T, I><<<blocks_for(n * c), kThreads, 0, scope.stream()>>>(
          logits.data<T>(), targets.data<I>(), lse.data<C>(), g.data<C>(), stats, n, c,
          ignore_index, label_smoothing, gx.data<T>());
      GPIPE_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace

GPIPE_REGISTER_KERNEL(cross_entropy_forward, DeviceType::kCUDA, cross_entropy_forward_cuda);
GPIPE_REGISTER_KERNEL(cross_entropy_backward, DeviceType::kCUDA, cross_entropy_backward_cuda);
GPIPE_KERNEL_ACCEPTS_16BIT(cross_entropy_forward, DeviceType::kCUDA, kBoth);
GPIPE_KERNEL_ACCEPTS_16BIT(cross_entropy_backward, DeviceType::kCUDA, kBoth);

}  // namespace gpipe::ops::cuda
