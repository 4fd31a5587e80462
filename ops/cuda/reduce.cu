// Reductions over the middle axis of [outer, n, inner] on CUDA.
//
// sum: with inner == 1 and long rows a block reduces a chunk of a row
// (coalesced reads); otherwise a thread walks one (outer, inner) column over
// a chunk of n (coalesced across neighbouring columns). Long reductions
// are cut into a number of chunks fixed by the shape; pass 1 writes one
// double partial per chunk, pass 2 adds them in chunk order. Accumulation is
// in double for both dtypes, so the result does not depend on the launch.
// max: a thread per column (inner > 1) or a block per row (inner == 1)
// keeps the first maximal index, as the CPU does; NaN follows the CPU's
// strict '>' scan: a NaN at index 0 wins, any later NaN is skipped.
#include "ops/cuda/common.cuh"
#include "ops/reduce_kernels.h"

namespace gpipe::ops::cuda {
namespace {

constexpr int64_t kChunkElems = 8192;        // reduced elements per chunk (pass 1)
constexpr int64_t kTargetThreads = 1 << 16;  // enough parallel columns x chunks to fill a GPU

// Chunks to cut a reduction of length n into, given `columns` independent outputs.
int64_t chunks_for(int64_t n, int64_t columns, bool rows) {
  const int64_t by_length = (n + kChunkElems - 1) / kChunkElems;
  if (rows)
    return std::max<int64_t>(1, std::min<int64_t>(by_length, 4096 / std::max<int64_t>(columns, 1)));
  const int64_t wanted = kTargetThreads / std::max<int64_t>(columns, 1);
  return std::clamp<int64_t>(wanted, 1, std::max<int64_t>(1, (n + 31) / 32));
}

// Pass 1, inner == 1: block task t = (row o, chunk c) sums row o's elements [lo, hi).
template <class T>
__global__ void row_sum_kernel(const T* x, int64_t outer, int64_t n, int64_t chunks,
                               double* partial) {
  __shared__ double shared[32];
  for (int64_t t = blockIdx.x; t < outer * chunks; t += gridDim.x) {  // uniform per block
    const int64_t o = t / chunks, c = t - o * chunks;
    const int64_t lo = c * n / chunks, hi = (c + 1) * n / chunks;
    const T* row = x + o * n;
    double acc = 0;
    for (int64_t k = lo + threadIdx.x; k < hi; k += blockDim.x)
      acc += static_cast<double>(load(row, k));
    acc = block_sum(acc, shared);
    if (threadIdx.x == 0) partial[t] = acc;
  }
}

// Pass 1, inner > 1: thread (column, chunk) sums x[o, lo:hi, i].
template <class T>
__global__ void column_sum_kernel(const T* x, int64_t outer, int64_t n, int64_t inner,
                                  int64_t chunks, double* partial) {
  const int64_t columns = outer * inner;
  GPIPE_KERNEL_LOOP(t, columns * chunks) {
    const int64_t c = t / columns, col = t - c * columns;
    const int64_t o = col / inner, i = col - o * inner;
    const int64_t lo = c * n / chunks, hi = (c + 1) * n / chunks;
    const T* p = x + o * n * inner + i;
    double acc = 0;
    for (int64_t k = lo; k < hi; ++k) acc += static_cast<double>(load(p, k * inner));
    partial[c * columns + col] = acc;  // chunk-major: pass 2 reads coalesced
  }
}

// Pass 2: out[col] = sum over chunks of partial, in chunk order (a 16-bit
// out: rounded to float32, then to 16 bits, as the CPU's float32 kernel
// on a widened copy and its narrowing do).
template <class T>
__global__ void finish_sum_kernel(const double* partial, int64_t columns, int64_t chunks,
                                  bool chunk_major, T* out) {
  GPIPE_KERNEL_LOOP(col, columns) {
    double acc = 0;
    for (int64_t c = 0; c < chunks; ++c)
      acc += chunk_major ? partial[c * columns + col] : partial[col * chunks + c];
    store(out, col, static_cast<compute_t<T>>(acc));
  }
}

void sum_cuda(const Tensor& x, int64_t outer, int64_t n, int64_t inner, Tensor& out) {
  const int64_t columns = outer * inner;
  if (columns == 0) return;
  KernelScope scope(out.device());
  dispatch_float_like(x.dtype(), "sum", [&](auto z) {
    using T = decltype(z);
    const bool rows = inner == 1 && n >= kThreads;  // short rows: a thread per row is better
    const int64_t chunks = n == 0 ? 1 : chunks_for(n, columns, rows);
    Tensor partial = workspace(columns * chunks, DType::kFloat64, out.device());
    double* pp = partial.data<double>();
    if (rows) {
      row_sum_kernel<T><<<blocks_for(outer * chunks, 1), kThreads, 0, scope.stream()>>>(
          x.data<T>(), outer, n, chunks, pp);
    } else {
      column_sum_kernel<T><<<blocks_for(columns * chunks), kThreads, 0, scope.stream()>>>(
          x.data<T>(), outer, n, inner, chunks, pp);
    }
    GPIPE_CUDA_CHECK_LAUNCH();
    finish_sum_kernel<T><<<blocks_for(columns), kThreads, 0, scope.stream()>>>(
        pp, columns, chunks, !rows, out.data<T>());
    GPIPE_CUDA_CHECK_LAUNCH();
  });
}

// Running maximum in the CPU's semantics (see the file comment). `best` < 0: none yet.
template <class T>
struct MaxAt {
  T value;
  int64_t index;
};

template <class T>
__device__ inline MaxAt<T> better(MaxAt<T> a, MaxAt<T> b) {  // a covers earlier indices than b
  if (a.index < 0) return b;
  if (b.index < 0) return a;
  if (b.value > a.value || (b.value == a.value && b.index < a.index)) return b;
  return a;
}

// inner == 1: a block per row; threads scan strided, then a tree in shared memory.
template <class T>
__global__ void row_max_kernel(const T* x, int64_t outer, int64_t n, T* out, int64_t* argmax) {
  __shared__ T sv[kThreads];
  __shared__ int64_t si[kThreads];
  for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {
    const T* row = x + o * n;
    MaxAt<T> m{T(0), -1};
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
      const T v = row[k];
      if (v != v) continue;  // NaN past index 0 never wins (see below for index 0)
      m = better(m, MaxAt<T>{v, k});
    }
    sv[threadIdx.x] = m.value;
    si[threadIdx.x] = m.index;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
      if (threadIdx.x < s) {
        const MaxAt<T> r = better(MaxAt<T>{sv[threadIdx.x], si[threadIdx.x]},
                                  MaxAt<T>{sv[threadIdx.x + s], si[threadIdx.x + s]});
        sv[threadIdx.x] = r.value;
        si[threadIdx.x] = r.index;
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      const T first = row[0];
      if (first != first || si[0] < 0) {  // NaN at index 0 sticks; all-NaN tail keeps index 0
        out[o] = first;
        argmax[o] = 0;
      } else {
        out[o] = sv[0];
        argmax[o] = si[0];
      }
    }
    __syncthreads();
  }
}

// inner > 1: a thread per (outer, inner) column, scanning like the CPU.
template <class T>
__global__ void column_max_kernel(const T* x, int64_t outer, int64_t n, int64_t inner, T* out,
                                  int64_t* argmax) {
  GPIPE_KERNEL_LOOP(col, outer * inner) {
    const int64_t o = col / inner, i = col - o * inner;
    const T* p = x + o * n * inner + i;
    T best = p[0];
    int64_t at = 0;
    for (int64_t k = 1; k < n; ++k) {
      const T v = p[k * inner];
      if (v > best) {
        best = v;
        at = k;
      }
    }
    out[col] = best;
    argmax[col] = at;
  }
}

void max_cuda(const Tensor& x, int64_t outer, int64_t n, int64_t inner, Tensor& out,
              Tensor& argmax) {
  if (outer * inner == 0) return;
  GPIPE_CHECK(n > 0, "max: cannot reduce an empty axis");
  KernelScope scope(out.device());
  dispatch_floating(x.dtype(), "max", [&](auto z) {
    using T = decltype(z);
    if (inner == 1) {
      row_max_kernel<T><<<blocks_for(outer, 1), kThreads, 0, scope.stream()>>>(
          x.data<T>(), outer, n, out.data<T>(), argmax.data<int64_t>());
    } else {
      column_max_kernel<T><<<blocks_for(outer * inner), kThreads, 0, scope.stream()>>>(
          x.data<T>(), outer, n, inner, out.data<T>(), argmax.data<int64_t>());
    }
  });
  GPIPE_CUDA_CHECK_LAUNCH();
}

template <class T>
__global__ void max_backward_kernel(const T* g, const int64_t* argmax, int64_t outer, int64_t n,
                                    int64_t inner, T* gx) {
  GPIPE_KERNEL_LOOP(col, outer * inner) {
    const int64_t o = col / inner, i = col - o * inner;
    gx[(o * n + argmax[col]) * inner + i] = g[col];  // one distinct target per column
  }
}

void max_backward_cuda(const Tensor& g, const Tensor& argmax, int64_t outer, int64_t n,
                       int64_t inner, Tensor& gx) {
  KernelScope scope(gx.device());
  GPIPE_CUDA_CHECK(cudaMemsetAsync(gx.raw_data(), 0, gx.nbytes(), scope.stream()));
  if (outer * inner == 0) return;
  dispatch_floating(g.dtype(), "max backward", [&](auto z) {
    using T = decltype(z);
    max_backward_kernel<T><<<blocks_for(outer * inner), kThreads, 0, scope.stream()>>>(
        g.data<T>(), argmax.data<int64_t>(), outer, n, inner, gx.data<T>());
  });
  GPIPE_CUDA_CHECK_LAUNCH();
}

// The squares of x[lo, hi) summed in double by the whole block (every
// thread of the block calls it; thread 0 gets the sum).
template <class T>
__device__ double block_squares(const T* x, int64_t lo, int64_t hi, double* shared) {
  double acc = 0;
  for (int64_t k = lo + threadIdx.x; k < hi; k += blockDim.x) {
    const double v = static_cast<double>(load(x, k));
    acc += v * v;
  }
  return block_sum(acc, shared);
}

// sum_squares_into, pass 1: block task b sums the squares of block b's
// elements [b * kSquaresBlock, ...) in double (the CPU's blocks).
template <class T>
__global__ void squares_block_kernel(const T* x, int64_t n, int64_t blocks, double* partial) {
  __shared__ double shared[32];
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {  // uniform per block
    const int64_t lo = b * kSquaresBlock, hi = min(n, lo + kSquaresBlock);
    const double acc = block_squares(x, lo, hi, shared);
    if (threadIdx.x == 0) partial[b] = acc;
  }
}

// Pass 2: one thread adds the blocks' sums in block order, as the CPU does.
__global__ void squares_finish_kernel(const double* partial, int64_t blocks, double* out) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  double acc = 0;
  for (int64_t b = 0; b < blocks; ++b) acc += partial[b];
  *out = acc;
}

void sum_squares_cuda(const Tensor& x, Tensor& out, int64_t index) {
  const int64_t n = x.numel();
  KernelScope scope(out.device());
  if (n == 0) {  // out[index] = 0, as the slot promises
    GPIPE_CUDA_CHECK(
        cudaMemsetAsync(out.data<double>() + index, 0, sizeof(double), scope.stream()));
    return;
  }
  const int64_t blocks = (n + kSquaresBlock - 1) / kSquaresBlock;
  Tensor partial = workspace(blocks, DType::kFloat64, out.device());
  dispatch_float_like(x.dtype(), "sum_of_squares", [&](auto z) {
    using T = decltype(z);
    squares_block_kernel<T><<<blocks_for(blocks, 1), kThreads, 0, scope.stream()>>>(
        x.data<T>(), n, blocks, partial.data<double>());
  });
  GPIPE_CUDA_CHECK_LAUNCH();
  squares_finish_kernel<<<1, 1, 0, scope.stream()>>>(partial.data<double>(), blocks,
                                                     out.data<double>() + index);
  GPIPE_CUDA_CHECK_LAUNCH();
}

// sum_squares_many: every tensor's kSquaresBlock blocks as the tasks of one
// launch per dtype (table row t: the tensor's address, lo, hi), one double
// per task; then thread k adds tensor k's tasks in block order, as
// squares_finish_kernel does for one tensor: the same bits in two launches
// instead of two per tensor.
template <class T>
__global__ void squares_tasks_kernel(const int64_t* table, int64_t tasks, double* partial) {
  __shared__ double shared[32];
  for (int64_t t = blockIdx.x; t < tasks; t += gridDim.x) {  // uniform per block
    const T* x = reinterpret_cast<const T*>(table[3 * t]);
    const double acc = block_squares(x, table[3 * t + 1], table[3 * t + 2], shared);
    if (threadIdx.x == 0) partial[t] = acc;
  }
}

// first[j] .. first[j + 1]: the tasks of the group's tensor j, summed into out[index[j]].
__global__ void squares_finish_many_kernel(const int64_t* first, const int64_t* index,
                                           int64_t tensors, const double* partial, double* out) {
  GPIPE_KERNEL_LOOP(j, tensors) {
    double acc = 0;
    for (int64_t t = first[j]; t < first[j + 1]; ++t) acc += partial[t];
    out[index[j]] = acc;
  }
}

void sum_squares_many_cuda(const std::vector<Tensor>& xs, Tensor& out) {
  KernelScope scope(out.device());
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16}) {
    std::vector<int64_t> table, first{0}, index;
    for (size_t k = 0; k < xs.size(); ++k) {
      const Tensor& x = xs[k];
      if (x.dtype() != dt) continue;
      GPIPE_ASSERT(x.is_contiguous() && x.device() == out.device());
      for (int64_t lo = 0; lo < x.numel(); lo += kSquaresBlock) {
        table.push_back(static_cast<int64_t>(reinterpret_cast<uintptr_t>(x.raw_data())));
        table.push_back(lo);
        table.push_back(std::min(x.numel(), lo + kSquaresBlock));
      }
      first.push_back(static_cast<int64_t>(table.size() / 3));
      index.push_back(static_cast<int64_t>(k));
    }
    if (index.empty()) continue;
    const int64_t tasks = first.back(), tensors = static_cast<int64_t>(index.size());
    // One host-to-device copy of the tables, queued on the compute stream.
    std::vector<int64_t> words = table;
    words.insert(words.end(), first.begin(), first.end());
    words.insert(words.end(), index.begin(), index.end());
    const Tensor dev =
        Tensor::from_vector(words, Shape{static_cast<int64_t>(words.size())}).to(out.device());
    const int64_t* d = dev.data<int64_t>();
    Tensor partial = workspace(std::max<int64_t>(tasks, 1), DType::kFloat64, out.device());
    if (tasks > 0) {
      dispatch_float_like(dt, "sum_of_squares", [&](auto z) {
        using T = decltype(z);
        squares_tasks_kernel<T><<<blocks_for(tasks, 1), kThreads, 0, scope.stream()>>>(
            d, tasks, partial.data<double>());
      });
      GPIPE_CUDA_CHECK_LAUNCH();
    }
    squares_finish_many_kernel<<<blocks_for(tensors), kThreads, 0, scope.stream()>>>(
        d + table.size(), d + table.size() + first.size(), tensors, partial.data<double>(),
        out.data<double>());
    GPIPE_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

GPIPE_REGISTER_KERNEL(sum_squares_many, DeviceType::kCUDA, sum_squares_many_cuda);
GPIPE_REGISTER_KERNEL(sum_squares_into, DeviceType::kCUDA, sum_squares_cuda);
GPIPE_REGISTER_KERNEL(reduce_sum, DeviceType::kCUDA, sum_cuda);
GPIPE_REGISTER_KERNEL(reduce_max, DeviceType::kCUDA, max_cuda);
GPIPE_REGISTER_KERNEL(reduce_max_backward, DeviceType::kCUDA, max_backward_cuda);
// Sums read 16-bit elements into double accumulators themselves.
GPIPE_KERNEL_ACCEPTS_16BIT(reduce_sum, DeviceType::kCUDA, kBoth);
GPIPE_KERNEL_ACCEPTS_16BIT(sum_squares_into, DeviceType::kCUDA, kBoth);

}  // namespace gpipe::ops::cuda
