// Embedding CUDA kernels (see ops/embedding_kernels.h).
//
// Forward: a validation kernel finds the first out-of-range index (atomicMin
// on its position, an integer, so the answer is exact), the host reads it
// back (one small synchronous copy, the price of the CPU contract "throws
// before writing anything"), then a gather kernel copies rows.
// Backward, deterministic and sort-free: an integer histogram (atomicAdd on
// counts is order-independent) marks the rows that receive gradient; then
// one block per vocabulary row scans the indices in tiles, collects the
// matching positions of each tile in position order (warp ballots plus a
// prefix over the warps), and adds those gradient rows into its own output
// row, each thread owning fixed columns. The sum order is position order,
// as on the CPU, so the result is bit-identical to ops/cpu/embedding.cc.
// Cost: every row that occurs scans the indices up to its last occurrence,
// O(distinct indices x positions) index reads; fine for the ~1e4-1e5
// positions of a training step. The backward does not re-validate: the
// forward already checked the same indices, and out-of-range ones are
// skipped rather than written.
#include <string>
#include <vector>

#include "ops/cuda/common.cuh"
#include "ops/embedding_kernels.h"

namespace gpipe::ops::cuda {
namespace {

__global__ void set_u64_kernel(unsigned long long* p, unsigned long long v) { *p = v; }

template <class I>
__global__ void first_bad_index_kernel(const I* idx, int64_t n, int64_t v,
                                       unsigned long long* first_bad) {
  GPIPE_KERNEL_LOOP(k, n) {
    const int64_t i = static_cast<int64_t>(idx[k]);
    if (i < 0 || i >= v) atomicMin(first_bad, static_cast<unsigned long long>(k));
  }
}

// Throws the CPU kernel's message for the first index outside [0, v).
template <class I>
void check_indices(const Tensor& indices, int64_t v, cudaStream_t stream) {
  const int64_t n = indices.numel();
  if (n == 0) return;
  Tensor flag = workspace(1, DType::kInt64, indices.device());
  auto* bad = static_cast<unsigned long long*>(flag.raw_data());
  set_u64_kernel<<<1, 1, 0, stream>>>(bad, static_cast<unsigned long long>(n));
  first_bad_index_kernel<I><<<blocks_for(n), kThreads, 0, stream>>>(indices.data<I>(), n, v, bad);
  GPIPE_CUDA_CHECK_LAUNCH();
  const auto k = static_cast<int64_t>(read_device_value<unsigned long long>(bad, stream));
  if (k >= n) return;
  const int64_t i = static_cast<int64_t>(read_device_value<I>(indices.data<I>() + k, stream));
  throw Error(detail::concat("embedding: index ", i, " at position ",
                             indices.shape().position_str(k), " of indices ", indices.shape(),
                             " is out of range for a table of V = ", v, " rows (valid: 0 .. ",
                             v - 1, ")"));
}

template <class T, class I>
__global__ void gather_kernel(const T* w, const I* idx, int64_t n, int64_t d, T* out) {
  GPIPE_KERNEL_LOOP(e, n * d) {
    const int64_t k = e / d, c = e - k * d;
    out[e] = w[static_cast<int64_t>(idx[k]) * d + c];
  }
}

template <class I>
__global__ void count_kernel(const I* idx, int64_t n, int64_t v, int* counts) {
  GPIPE_KERNEL_LOOP(k, n) {
    const int64_t i = static_cast<int64_t>(idx[k]);
    if (i >= 0 && i < v) atomicAdd(counts + i, 1);
  }
}

// Block per vocabulary row: gw[row] = sum of g[k] over positions k with idx[k] == row, in k order.
template <class T, class I>
__global__ void scatter_rows_kernel(const T* g, const I* idx, const int* counts, int64_t n,
                                    int64_t v, int64_t d, bool accumulate, T* gw) {
  __shared__ int64_t matches[kThreads];
  __shared__ int warp_counts[kThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int64_t row = blockIdx.x; row < v; row += gridDim.x) {  // uniform per block
    T* out = gw + row * d;
    const int want = counts[row];
    if (accumulate && want == 0) continue;  // uniform per block: rows nobody used stay as they are
    if (!accumulate)
      for (int64_t c = threadIdx.x; c < d; c += blockDim.x) out[c] = T(0);
    int found = 0;
    for (int64_t base = 0; base < n && found < want; base += blockDim.x) {
      const int64_t k = base + threadIdx.x;
      const bool hit = k < n && static_cast<int64_t>(idx[k]) == row;
      const unsigned ballot = __ballot_sync(0xffffffffu, hit);
      if (lane == 0) warp_counts[warp] = __popc(ballot);
      __syncthreads();
      int before = 0, total = 0;  // matches in earlier warps, and in the whole tile
      for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) {
        if (w < warp) before += warp_counts[w];
        total += warp_counts[w];
      }
      if (hit) matches[before + __popc(ballot & ((1u << lane) - 1u))] = k;
      __syncthreads();
      for (int m = 0; m < total; ++m) {  // position order
        const T* src = g + matches[m] * d;
        for (int64_t c = threadIdx.x; c < d; c += blockDim.x) out[c] += src[c];
      }
      found += total;
      __syncthreads();  // before the next tile overwrites matches / warp_counts
    }
  }
}

void embedding_forward_cuda(const Tensor& weight, const Tensor& indices, Tensor& out) {
  KernelScope scope(out.device());
  dispatch_float_like(weight.dtype(), "embedding", [&](auto z) {  // a gather: copies elements
    using T = decltype(z);
    dispatch_index(indices.dtype(), "embedding", [&](auto zi) {
      using I = decltype(zi);
      const int64_t v = weight.size(0), d = weight.size(1), n = indices.numel();
      check_indices<I>(indices, v, scope.stream());
      if (n * d == 0) return;
      gather_kernel<T, I><<<blocks_for(n * d), kThreads, 0, scope.stream()>>>(
          weight.data<T>(), indices.data<I>(), n, d, out.data<T>());
      GPIPE_CUDA_CHECK_LAUNCH();
    });
  });
}

void embedding_backward_cuda(const Tensor& g, const Tensor& indices, bool accumulate,
                             Tensor& gweight) {
  KernelScope scope(gweight.device());
  dispatch_floating(gweight.dtype(), "embedding backward", [&](auto z) {
    using T = decltype(z);
    dispatch_index(indices.dtype(), "embedding backward", [&](auto zi) {
      using I = decltype(zi);
      const int64_t v = gweight.size(0), d = gweight.size(1), n = indices.numel();
      if (v * d == 0) return;
      Tensor counts = workspace(v, DType::kInt32, gweight.device());
      GPIPE_CUDA_CHECK(cudaMemsetAsync(counts.raw_data(), 0, counts.nbytes(), scope.stream()));
      if (n > 0) {
        count_kernel<I><<<blocks_for(n), kThreads, 0, scope.stream()>>>(indices.data<I>(), n, v,
                                                                        counts.data<int32_t>());
        GPIPE_CUDA_CHECK_LAUNCH();
      }
      scatter_rows_kernel<T, I><<<blocks_for(v, 1), kThreads, 0, scope.stream()>>>(
          g.data<T>(), indices.data<I>(), counts.data<int32_t>(), n, v, d, accumulate,
          gweight.data<T>());
      GPIPE_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace

GPIPE_REGISTER_KERNEL(embedding_forward, DeviceType::kCUDA, embedding_forward_cuda);
GPIPE_REGISTER_KERNEL(embedding_backward, DeviceType::kCUDA, embedding_backward_cuda);
// The backward sums rows into gweight in place, so a 16-bit gweight goes
// through float32 copies (one rounding at the end, as on the CPU).
GPIPE_KERNEL_ACCEPTS_16BIT(embedding_forward, DeviceType::kCUDA, kBoth);

}  // namespace gpipe::ops::cuda
