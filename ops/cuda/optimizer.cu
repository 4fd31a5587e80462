// The optimizers' element loops on CUDA (ops/optimizer_kernels.h): the same
// per-element formulas as ops/cpu/optimizer.cc (nvcc may fuse a multiply and
// an add the CPU build keeps apart: equal to round-off), one thread per element of
// [lo, hi). The scalars are rounded to the dtype on the host, as the CPU
// kernel rounds them. optim/ calls them for CUDA parameters; compile-checked,
// no GPU has run them yet.
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <type_traits>
#include <vector>

#include "ops/cuda/common.cuh"
#include "ops/optimizer_kernels.h"

namespace gpipe::ops::cuda {
namespace {

// lerp as PyTorch rounds it (ops/cpu/optimizer.cc).
template <class T>
__device__ inline T lerp(T a, T b, T w) {
  return w < T(0.5) ? a + w * (b - a) : b - (b - a) * (T(1) - w);
}

template <class T>
struct AdamScalars {
  T b2, c1, c2, eps, wd, shrink, ss, bc2;
  int decay;  // 0 none, 1 L2 (Adam), 2 decoupled (AdamW)
};

template <class T>
__global__ void adam_kernel(AdamScalars<T> k, T* p, const T* g, T* m, T* v, int64_t n) {
  GPIPE_KERNEL_LOOP(i, n) {
    T d = g[i];
    if (k.decay == 2) p[i] *= k.shrink;
    if (k.decay == 1) d += k.wd * p[i];
    m[i] = lerp(m[i], d, k.c1);
    v[i] = k.b2 * v[i] + k.c2 * (d * d);
    const T denom = sqrt(v[i]) / k.bc2 + k.eps;
    p[i] -= k.ss * (m[i] / denom);
  }
}

void adam_cuda(const AdamStepArgs& s, Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
               int64_t lo, int64_t hi) {
  const int64_t n = hi - lo;
  if (n <= 0) return;
  KernelScope scope(param.device());
  dispatch_floating(param.dtype(), "Adam", [&](auto z) {
    using T = decltype(z);
    const AdamScalars<T> k{static_cast<T>(s.beta2),           static_cast<T>(s.one_minus_beta1),
                           static_cast<T>(s.one_minus_beta2), static_cast<T>(s.eps),
                           static_cast<T>(s.weight_decay),    static_cast<T>(s.shrink),
                           static_cast<T>(s.step_size),       static_cast<T>(s.bc2_sqrt),
                           !s.decay ? 0 : s.decoupled ? 2 : 1};
    adam_kernel<T><<<blocks_for(n), kThreads, 0, scope.stream()>>>(
        k, param.data<T>() + lo, grad.data<T>() + lo, m.data<T>() + lo, v.data<T>() + lo, n);
  });
  GPIPE_CUDA_CHECK_LAUNCH();
}

// adam_update_many: every tensor cut into chunks, one launch per dtype; a
// block takes a chunk (its pointers, length and which scalars), each
// element updated by adam_kernel's formula.
constexpr int64_t kAdamChunk = 1 << 16;

template <class T>
struct AdamTask {
  T* p;
  const T* g;
  T* m;
  T* v;
  int64_t n;
  int64_t scalars;  // index into the scalars table
};

template <class T>
__global__ void adam_many_kernel(const AdamTask<T>* tasks, int64_t count,
                                 const AdamScalars<T>* scalars) {
  for (int64_t t = blockIdx.x; t < count; t += gridDim.x) {
    const AdamTask<T> a = tasks[t];
    const AdamScalars<T> k = scalars[a.scalars];
    for (int64_t i = threadIdx.x; i < a.n; i += blockDim.x) {
      T d = a.g[i];
      if (k.decay == 2) a.p[i] *= k.shrink;
      if (k.decay == 1) d += k.wd * a.p[i];
      a.m[i] = lerp(a.m[i], d, k.c1);
      a.v[i] = k.b2 * a.v[i] + k.c2 * (d * d);
      const T denom = sqrt(a.v[i]) / k.bc2 + k.eps;
      a.p[i] -= k.ss * (a.m[i] / denom);
    }
  }
}

// Host structs as device bytes: one int64 tensor (8-byte aligned), copied on the compute stream.
template <class S>
Tensor device_table(const std::vector<S>& rows, Device device) {
  static_assert(std::is_trivially_copyable_v<S> && alignof(S) <= alignof(int64_t));
  std::vector<int64_t> words((rows.size() * sizeof(S) + sizeof(int64_t) - 1) / sizeof(int64_t));
  std::memcpy(words.data(), rows.data(), rows.size() * sizeof(S));
  return Tensor::from_vector(words, Shape{static_cast<int64_t>(words.size())}).to(device);
}

void adam_many_cuda(const std::vector<AdamStepArgs>& args, std::vector<Tensor>& params,
                    const std::vector<Tensor>& grads, std::vector<Tensor>& ms,
                    std::vector<Tensor>& vs) {
  if (params.empty()) return;
  KernelScope scope(params.front().device());
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    dispatch_floating(dt, "Adam", [&](auto z) {
      using T = decltype(z);
      std::vector<AdamTask<T>> tasks;
      std::vector<AdamScalars<T>> scalars;
      for (size_t i = 0; i < params.size(); ++i) {
        if (params[i].dtype() != dt || params[i].numel() == 0) continue;
        for (const Tensor* t :
             std::initializer_list<const Tensor*>{&params[i], &grads[i], &ms[i], &vs[i]})
          GPIPE_ASSERT(t->dtype() == dt && t->is_contiguous() && t->numel() == params[i].numel() &&
                       t->device() == params[i].device());
        const AdamStepArgs& s = args[i];
        scalars.push_back({static_cast<T>(s.beta2), static_cast<T>(s.one_minus_beta1),
                           static_cast<T>(s.one_minus_beta2), static_cast<T>(s.eps),
                           static_cast<T>(s.weight_decay), static_cast<T>(s.shrink),
                           static_cast<T>(s.step_size), static_cast<T>(s.bc2_sqrt),
                           !s.decay      ? 0
                           : s.decoupled ? 2
                                         : 1});
        const int64_t n = params[i].numel();
        for (int64_t lo = 0; lo < n; lo += kAdamChunk)
          tasks.push_back({params[i].data<T>() + lo, grads[i].data<T>() + lo, ms[i].data<T>() + lo,
                           vs[i].data<T>() + lo, std::min(kAdamChunk, n - lo),
                           static_cast<int64_t>(scalars.size() - 1)});
      }
      if (tasks.empty()) return;
      const Device device = params.front().device();
      const Tensor task_table = device_table(tasks, device);
      const Tensor scalar_table = device_table(scalars, device);
      const int64_t count = static_cast<int64_t>(tasks.size());
      adam_many_kernel<T><<<blocks_for(count, 1), kThreads, 0, scope.stream()>>>(
          reinterpret_cast<const AdamTask<T>*>(task_table.raw_data()), count,
          reinterpret_cast<const AdamScalars<T>*>(scalar_table.raw_data()));
      GPIPE_CUDA_CHECK_LAUNCH();
    });
  }
}

template <class T>
__global__ void sgd_kernel(T lr, T wd, T mom, T keep, bool first, bool decay, int momentum, T* p,
                           const T* g, T* buf,
                           int64_t n) {  // momentum: 0 none, 1 plain, 2 Nesterov
  GPIPE_KERNEL_LOOP(i, n) {
    T d = g[i];
    if (decay) d += wd * p[i];
    if (momentum > 0) {
      buf[i] = first ? d : mom * buf[i] + keep * d;
      d = momentum == 2 ? d + mom * buf[i] : buf[i];
    }
    p[i] -= lr * d;
  }
}

void sgd_cuda(const SgdStepArgs& s, Tensor& param, const Tensor& grad, Tensor& buffer, int64_t lo,
              int64_t hi) {
  const int64_t n = hi - lo;
  if (n <= 0) return;
  KernelScope scope(param.device());
  dispatch_floating(param.dtype(), "SGD", [&](auto z) {
    using T = decltype(z);
    const int momentum = !buffer.defined() ? 0 : s.nesterov ? 2 : 1;
    sgd_kernel<T><<<blocks_for(n), kThreads, 0, scope.stream()>>>(
        static_cast<T>(s.lr), static_cast<T>(s.weight_decay), static_cast<T>(s.momentum),
        static_cast<T>(s.keep), s.first, s.weight_decay != 0, momentum, param.data<T>() + lo,
        grad.data<T>() + lo, momentum > 0 ? buffer.data<T>() + lo : nullptr, n);
  });
  GPIPE_CUDA_CHECK_LAUNCH();
}

template <class T>
__global__ void rmsprop_kernel(T lr, T wd, bool decay, T a, T c, T eps, T mom, T* p, const T* g,
                               T* sq, T* buf, T* ga, int64_t n) {
  GPIPE_KERNEL_LOOP(i, n) {
    T d = g[i];
    if (decay) d += wd * p[i];
    sq[i] = a * sq[i] + c * (d * d);
    T avg;
    if (ga) {
      ga[i] = lerp(ga[i], d, c);
      avg = sqrt(sq[i] - ga[i] * ga[i]) + eps;
    } else {
      avg = sqrt(sq[i]) + eps;
    }
    if (buf) {
      buf[i] = mom * buf[i] + d / avg;
      p[i] -= lr * buf[i];
    } else {
      p[i] -= lr * (d / avg);
    }
  }
}

void rmsprop_cuda(const RmsPropStepArgs& s, Tensor& param, const Tensor& grad, Tensor& square_avg,
                  Tensor& buffer, Tensor& grad_avg, int64_t lo, int64_t hi) {
  const int64_t n = hi - lo;
  if (n <= 0) return;
  KernelScope scope(param.device());
  dispatch_floating(param.dtype(), "RMSProp", [&](auto z) {
    using T = decltype(z);
    rmsprop_kernel<T><<<blocks_for(n), kThreads, 0, scope.stream()>>>(
        static_cast<T>(s.lr), static_cast<T>(s.weight_decay), s.weight_decay != 0,
        static_cast<T>(s.alpha), static_cast<T>(1.0 - s.alpha), static_cast<T>(s.eps),
        static_cast<T>(s.momentum), param.data<T>() + lo, grad.data<T>() + lo,
        square_avg.data<T>() + lo, buffer.defined() ? buffer.data<T>() + lo : nullptr,
        grad_avg.defined() ? grad_avg.data<T>() + lo : nullptr, n);
  });
  GPIPE_CUDA_CHECK_LAUNCH();
}

}  // namespace

GPIPE_REGISTER_KERNEL(adam_update, DeviceType::kCUDA, adam_cuda);
GPIPE_REGISTER_KERNEL(adam_update_many, DeviceType::kCUDA, adam_many_cuda);
GPIPE_REGISTER_KERNEL(sgd_update, DeviceType::kCUDA, sgd_cuda);
GPIPE_REGISTER_KERNEL(rmsprop_update, DeviceType::kCUDA, rmsprop_cuda);

}  // namespace gpipe::ops::cuda
