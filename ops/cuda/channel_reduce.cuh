// Per-channel sums over [N, C, S] tensors (batch norm statistics and
// gradients, conv bias gradients), deterministic and atomic-free.
//
// channel_sums(f) computes out[c] = sum of f(e, c) over the N * S elements e
// of channel c, in double. The N * S elements of a channel are cut into a
// number of chunks fixed by the shape; pass 1 gives each (channel, chunk) a
// block that writes one partial, pass 2 adds a channel's partials in chunk
// order. `f` is a device functor (a struct with a __device__ operator()).
#pragma once

#include "ops/cuda/common.cuh"

namespace gpipe::ops::cuda {

struct ChannelLayout {
  int64_t n = 0, c = 0, s = 0;
  // Flat offset of the j-th element (j in [0, n * s)) of channel ch.
  __host__ __device__ int64_t offset(int64_t j, int64_t ch) const {
    const int64_t nn = j / s;
    return (nn * c + ch) * s + (j - nn * s);
  }
};

template <class F>
__global__ void channel_partials_kernel(ChannelLayout l, int64_t chunks, F f, double* partial) {
  __shared__ double shared[32];
  const int64_t m = l.n * l.s;
  for (int64_t t = blockIdx.x; t < l.c * chunks; t += gridDim.x) {  // uniform per block
    const int64_t ch = t / chunks, k = t - ch * chunks;
    const int64_t lo = k * m / chunks, hi = (k + 1) * m / chunks;
    double acc = 0;
    for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x) acc += f(l.offset(j, ch), ch);
    acc = block_sum(acc, shared);
    if (threadIdx.x == 0) partial[t] = acc;
  }
}

template <class Out>
__global__ void channel_finish_kernel(const double* partial, int64_t c, int64_t chunks, Out* out) {
  GPIPE_KERNEL_LOOP(ch, c) {
    double acc = 0;
    for (int64_t k = 0; k < chunks; ++k) acc += partial[ch * chunks + k];
    out[ch] = static_cast<Out>(acc);
  }
}

// out: c values in device memory (double, or a tensor dtype: the double sum
// is converted). Queued on `stream` (the device's compute stream).
template <class F, class Out>
void channel_sums(const ChannelLayout& l, Device device, cudaStream_t stream, F f, Out* out) {
  if (l.c == 0) return;
  const int64_t m = l.n * l.s;
  const int64_t chunks =
      std::clamp<int64_t>((m + 4095) / 4096, 1, std::max<int64_t>(1, 2048 / l.c));
  Tensor partial = workspace(l.c * chunks, DType::kFloat64, device);
  channel_partials_kernel<<<blocks_for(l.c * chunks, 1), kThreads, 0, stream>>>(
      l, chunks, f, partial.data<double>());
  GPIPE_CUDA_CHECK_LAUNCH();
  channel_finish_kernel<<<blocks_for(l.c), kThreads, 0, stream>>>(partial.data<double>(), l.c,
                                                                  chunks, out);
  GPIPE_CUDA_CHECK_LAUNCH();
}

// f(e, c) = x[e].
template <class T>
struct ValueTerm {
  const T* x;
  __device__ double operator()(int64_t e, int64_t) const { return static_cast<double>(x[e]); }
};

}  // namespace gpipe::ops::cuda
