// Fused bias + activation CUDA kernels (ops::bias_activation, the epilogue
// of a linear layer), the formulas of ops/cpu/bias_act.cc.
//
// Forward: one flat pass y = act(z + bias[column]). Backward: one pass
// computes gz = g * act'(.) and the bias gradient's column sums together: a
// block per (tile of 256 columns, chunk of rows), a thread per column walking
// its chunk's rows (neighbouring threads read neighbouring columns), summing
// in double into the chunk's partial row; a second pass adds each column's
// partials in chunk order. The chunks depend only on the shape, so the sums
// are deterministic and atomic-free.
//
// 16-bit z, y, g and gz (float32 arithmetic, each output rounded once) take
// a float32 bias (a layer's master weight, whose gradient is float32) or one
// of their own dtype: a bf16 Transformer's linear layers run their epilogue
// here on 16-bit activations, with no float32 copy of the product.
#include "ops/cuda/common.cuh"
#include "ops/cuda/pending.h"
#include "ops/elementwise_kernels.h"

namespace gpipe::ops::cuda {
namespace {

constexpr int kColumns = 256;       // threads per backward block: one column each
constexpr int64_t kChunkRows = 32;  // rows per chunk, about
constexpr int64_t kMaxChunks = 1024;

// derivative_from_input() as a constant kernels may read: nvcc refuses a call
// of the host-only constexpr function from device code.
template <FusedActivation kAct>
constexpr bool kFromInput = derivative_from_input(kAct);

template <FusedActivation kAct, class C>
__device__ inline C apply(C u) {
  if constexpr (kAct == FusedActivation::kRelu) return u > C(0) ? u : C(0);
  if constexpr (kAct == FusedActivation::kGelu) return gelu_fn(u);
  if constexpr (kAct == FusedActivation::kGeluTanh) return gelu_tanh_fn(u);
  if constexpr (kAct == FusedActivation::kSilu) return u / (C(1) + dexp(-u));
  if constexpr (kAct == FusedActivation::kTanh) return dtanh(u);
  if constexpr (kAct == FusedActivation::kSigmoid) return C(1) / (C(1) + dexp(-u));
  return u;
}

// act'(u): from the output y (relu, tanh, sigmoid), u (the GELUs); 1 for none.
template <FusedActivation kAct, class C>
__device__ inline C derivative(C u, C y) {
  if constexpr (kAct == FusedActivation::kRelu) return y > C(0) ? C(1) : C(0);
  if constexpr (kAct == FusedActivation::kGelu) return gelu_grad(u);
  if constexpr (kAct == FusedActivation::kGeluTanh) return gelu_tanh_grad(u);
  if constexpr (kAct == FusedActivation::kSilu) {
    const C s = C(1) / (C(1) + dexp(-u));
    return s * (C(1) + u * (C(1) - s));
  }
  if constexpr (kAct == FusedActivation::kTanh) return C(1) - y * y;
  if constexpr (kAct == FusedActivation::kSigmoid) return y * (C(1) - y);
  return C(1);
}

template <FusedActivation kAct, class T, class B, class C = compute_t<T>>
__global__ void forward_kernel(const T* z, const B* bias, T* y, int64_t rows, int64_t n) {
  GPIPE_KERNEL_LOOP(i, rows * n) {
    C u = load(z, i);
    if (bias != nullptr) u += static_cast<C>(load(bias, i % n));
    store(y, i, apply<kAct>(u));
  }
}

template <FusedActivation kAct, class T, class B, class C = compute_t<T>>
__global__ void backward_kernel(const T* z, const B* bias, const T* y, const T* g, T* gz,
                                double* partial, int64_t rows, int64_t n, int64_t chunks) {
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kColumns + threadIdx.x;
  if (col >= n) return;
  const int64_t k = blockIdx.y, lo = k * rows / chunks, hi = (k + 1) * rows / chunks;
  const C b = bias != nullptr ? static_cast<C>(load(bias, col)) : C(0);
  double sum = 0;
  for (int64_t r = lo; r < hi; ++r) {
    const int64_t i = r * n + col;
    C d = 1;
    if constexpr (kFromInput<kAct>)
      d = derivative<kAct>(load(z, i) + b, C(0));
    else if constexpr (kAct != FusedActivation::kNone)
      d = derivative<kAct>(C(0), load(y, i));
    const C v = load(g, i) * d;
    if (gz != nullptr) store(gz, i, v);
    sum += static_cast<double>(v);
  }
  if (partial != nullptr) partial[k * n + col] = sum;
}

// Note [Row-wise epilogue kernels]. Pending a GPU run (Note [Pending CUDA
// kernels] in ops/cuda/pending.h). The kernels above index every element
// with a 64-bit modulo for its bias column and move 2 bytes per load for
// 16-bit rows: on an H200 the forward ran at about 0.7 TB/s. Where the row
// length is a multiple of a 16-byte pack of V elements and the tensors start
// on 16 bytes, these move whole packs: forward a thread per pack (one
// modulo per pack, 32-bit where the packs fit), backward a thread per pack
// of columns and chunk of rows. Each element's arithmetic and rounding, the
// chunks and the order of the bias sums are those above, so the results
// have the same bits (tests/cuda/fused_test.cc compares them).
template <class T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

template <FusedActivation kAct, class T, class B, int V, class I, class C = compute_t<T>>
__global__ void packs_forward_kernel(const T* z, const B* bias, T* y, I packs, I row_packs) {
  const auto* zp = reinterpret_cast<const Pack<T, V>*>(z);
  auto* yp = reinterpret_cast<Pack<T, V>*>(y);
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < packs;
       i += static_cast<I>(blockDim.x) * gridDim.x) {
    const I c0 = (i % row_packs) * V;
    const Pack<T, V> in = zp[i];
    Pack<T, V> out;
#pragma unroll
    for (int e = 0; e < V; ++e) {
      C u = load(in.v, e);
      if (bias != nullptr) u += static_cast<C>(load(bias, c0 + e));
      store(out.v, e, apply<kAct>(u));
    }
    yp[i] = out;
  }
}

template <FusedActivation kAct, class T, class B, int V, class C = compute_t<T>>
__global__ void packs_backward_kernel(const T* z, const B* bias, const T* y, const T* g, T* gz,
                                      double* partial, int64_t rows, int64_t n, int64_t chunks) {
  const int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (p >= n / V) return;
  const int64_t k = blockIdx.y, lo = k * rows / chunks, hi = (k + 1) * rows / chunks;
  const int64_t c0 = p * V;
  C b[V];
  double sum[V];
#pragma unroll
  for (int e = 0; e < V; ++e) {
    b[e] = bias != nullptr ? static_cast<C>(load(bias, c0 + e)) : C(0);
    sum[e] = 0;
  }
  for (int64_t r = lo; r < hi; ++r) {
    const int64_t at = r * n + c0;
    const Pack<T, V> gp = *reinterpret_cast<const Pack<T, V>*>(g + at);
    Pack<T, V> ap{}, out;
    if constexpr (kFromInput<kAct>)
      ap = *reinterpret_cast<const Pack<T, V>*>(z + at);
    else if constexpr (kAct != FusedActivation::kNone)
      ap = *reinterpret_cast<const Pack<T, V>*>(y + at);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      C d = 1;
      if constexpr (kFromInput<kAct>)
        d = derivative<kAct>(load(ap.v, e) + b[e], C(0));
      else if constexpr (kAct != FusedActivation::kNone)
        d = derivative<kAct>(C(0), load(ap.v, e));
      const C v = load(gp.v, e) * d;
      store(out.v, e, v);
      sum[e] += static_cast<double>(v);
    }
    if (gz != nullptr) *reinterpret_cast<Pack<T, V>*>(gz + at) = out;
  }
  if (partial != nullptr) {
#pragma unroll
    for (int e = 0; e < V; ++e) partial[k * n + c0 + e] = sum[e];
  }
}

// Elements of T per 16-byte pack.
template <class T>
constexpr int kPack = static_cast<int>(16 / sizeof(T));

// Whether the pack kernels may run on these tensors (Note [Row-wise epilogue kernels]).
template <class T>
bool packed(int64_t n, std::initializer_list<const Tensor*> tensors) {
  if (!pending_kernels() || n % kPack<T> != 0) return false;
  for (const Tensor* t : tensors)
    if (t->defined() && reinterpret_cast<uintptr_t>(t->raw_data()) % 16 != 0) return false;
  return true;
}

template <class B>
__global__ void finish_kernel(const double* partial, B* gbias, int64_t n, int64_t chunks) {
  GPIPE_KERNEL_LOOP(col, n) {
    double s = 0;
    for (int64_t k = 0; k < chunks; ++k) s += partial[k * n + col];
    store(gbias, col, static_cast<compute_t<B>>(s));
  }
}

template <class F>
void dispatch_act(FusedActivation act, F&& f) {
  switch (act) {
    case FusedActivation::kNone:
      return f(std::integral_constant<FusedActivation, FusedActivation::kNone>{});
    case FusedActivation::kRelu:
      return f(std::integral_constant<FusedActivation, FusedActivation::kRelu>{});
    case FusedActivation::kGelu:
      return f(std::integral_constant<FusedActivation, FusedActivation::kGelu>{});
    case FusedActivation::kTanh:
      return f(std::integral_constant<FusedActivation, FusedActivation::kTanh>{});
    case FusedActivation::kSigmoid:
      return f(std::integral_constant<FusedActivation, FusedActivation::kSigmoid>{});
    case FusedActivation::kGeluTanh:
      return f(std::integral_constant<FusedActivation, FusedActivation::kGeluTanh>{});
    case FusedActivation::kSilu:
      return f(std::integral_constant<FusedActivation, FusedActivation::kSilu>{});
  }
}

// Calls f(T{}, B{}): the activations' dtype and the bias's (T's own, or
// float32 beside a 16-bit T).
template <class F>
void dispatch_types(DType t, const Tensor& bias, const char* op, F&& f) {
  dispatch_float_like(t, op, [&](auto z) {
    using T = decltype(z);
    if constexpr (is_16bit_v<T>) {
      if (bias.defined() && bias.dtype() == DType::kFloat32) return f(z, float{});
    }
    GPIPE_CHECK(!bias.defined() || bias.dtype() == t, op, ": a ", bias.dtype(), " bias beside ", t,
                " activations (expected ", t,
                t == DType::kBFloat16 || t == DType::kFloat16 ? " or float32)" : ")");
    f(z, z);
  });
}

template <class T>
T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

void forward_cuda(FusedActivation act, const Tensor& z, const Tensor& bias, Tensor& y) {
  const int64_t n = z.rank() == 0 ? 1 : z.size(-1);
  if (z.numel() == 0 || n == 0) return;
  const int64_t rows = z.numel() / n;
  KernelScope scope(y.device());
  dispatch_types(z.dtype(), bias, "bias_activation", [&](auto tz, auto tb) {
    using T = decltype(tz);
    using B = decltype(tb);
    constexpr int kV = kPack<T>;
    const bool pack = packed<T>(n, {&z, &y});
    const int64_t packs = rows * n / kV;
    dispatch_act(act, [&](auto a) {
      constexpr FusedActivation kAct = decltype(a)::value;
      if (pack && packs <= INT32_MAX)
        packs_forward_kernel<kAct, T, B, kV, uint32_t>
            <<<blocks_for(packs), kThreads, 0, scope.stream()>>>(
                z.data<T>(), data_or_null<B>(bias), y.data<T>(), static_cast<uint32_t>(packs),
                static_cast<uint32_t>(n / kV));
      else if (pack)
        packs_forward_kernel<kAct, T, B, kV, int64_t>
            <<<blocks_for(packs), kThreads, 0, scope.stream()>>>(z.data<T>(), data_or_null<B>(bias),
                                                                 y.data<T>(), packs, n / kV);
      else
        forward_kernel<decltype(a)::value, T, B>
            <<<blocks_for(rows * n), kThreads, 0, scope.stream()>>>(
                z.data<T>(), data_or_null<B>(bias), y.data<T>(), rows, n);
    });
  });
  GPIPE_CUDA_CHECK_LAUNCH();
}

void backward_cuda(FusedActivation act, const Tensor& z, const Tensor& bias, const Tensor& y,
                   const Tensor& g, Tensor& gz, Tensor& gbias) {
  if (!gz.defined() && !gbias.defined()) return;
  const int64_t n = g.rank() == 0 ? 1 : g.size(-1);
  const int64_t rows = n == 0 ? 0 : g.numel() / n;
  KernelScope scope(g.device());
  if (rows == 0) {
    if (gbias.defined())
      GPIPE_CUDA_CHECK(cudaMemsetAsync(gbias.raw_data(), 0, gbias.nbytes(), scope.stream()));
    return;
  }
  const Tensor& b = bias.defined() ? bias : gbias;  // the bias's dtype, for the dispatch
  dispatch_types(g.dtype(), b, "bias_activation backward", [&](auto tz, auto tb) {
    using T = decltype(tz);
    using B = decltype(tb);
    constexpr int kV = kPack<T>;
    const bool pack = packed<T>(n, {&z, &y, &g, &gz});
    const int64_t chunks = std::clamp<int64_t>(rows / kChunkRows, 1, kMaxChunks);
    Tensor partial;
    if (gbias.defined()) partial = workspace(chunks * n, DType::kFloat64, g.device());
    double* pp = partial.defined() ? partial.data<double>() : nullptr;
    dispatch_act(act, [&](auto a) {
      if (pack) {
        constexpr int kPackThreads = 128;
        const dim3 grid(static_cast<unsigned>((n / kV + kPackThreads - 1) / kPackThreads),
                        static_cast<unsigned>(chunks));
        packs_backward_kernel<decltype(a)::value, T, B, kV>
            <<<grid, kPackThreads, 0, scope.stream()>>>(data_or_null<T>(z), data_or_null<B>(bias),
                                                        data_or_null<T>(y), g.data<T>(),
                                                        data_or_null<T>(gz), pp, rows, n, chunks);
      } else {
        const dim3 grid(static_cast<unsigned>((n + kColumns - 1) / kColumns),
                        static_cast<unsigned>(chunks));
        backward_kernel<decltype(a)::value, T, B><<<grid, kColumns, 0, scope.stream()>>>(
            data_or_null<T>(z), data_or_null<B>(bias), data_or_null<T>(y), g.data<T>(),
            data_or_null<T>(gz), pp, rows, n, chunks);
      }
    });
    if (gbias.defined())
      finish_kernel<B>
          <<<blocks_for(n), kThreads, 0, scope.stream()>>>(pp, gbias.data<B>(), n, chunks);
  });
  GPIPE_CUDA_CHECK_LAUNCH();
}

}  // namespace

GPIPE_REGISTER_KERNEL(bias_act_forward, DeviceType::kCUDA, forward_cuda);
GPIPE_REGISTER_KERNEL(bias_act_backward, DeviceType::kCUDA, backward_cuda);
GPIPE_KERNEL_ACCEPTS_16BIT(bias_act_forward, DeviceType::kCUDA, kBoth);
GPIPE_KERNEL_ACCEPTS_16BIT(bias_act_backward, DeviceType::kCUDA, kBoth);

}  // namespace gpipe::ops::cuda
