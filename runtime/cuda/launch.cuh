// Device-code helpers shared by runtime/cuda and ops/cuda kernels (include
// from .cu files only): launch geometry, strided indexing, and the
// device/stream a kernel on some tensor runs on.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "core/tensor.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/device.h"

namespace gpipe::cuda {

inline constexpr int kThreads = 256;          // threads per block for elementwise kernels
inline constexpr int64_t kMaxBlocks = 65535;  // grid cap; kernels use grid-stride loops

// Blocks for `n` elements at `threads` per block, capped (grid-stride loops cover the rest).
inline int blocks_for(int64_t n, int threads = kThreads) {
  return static_cast<int>(std::clamp<int64_t>((n + threads - 1) / threads, 1, kMaxBlocks));
}

// Sets the tensor's device current and gives its compute stream: every
// kernel wrapper starts with `KernelScope scope(out.device());`.
class KernelScope {
 public:
  explicit KernelScope(Device device)
      : guard_(device.index), stream_(compute_stream(device.index)) {}
  cudaStream_t stream() const { return stream_; }

 private:
  DeviceGuard guard_;
  cudaStream_t stream_;
};

// Grid-stride loop over [0, n).
#define GPIPE_KERNEL_LOOP(i, n)                                                          \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

inline constexpr int kMaxDims = 8;

// Offset, in elements, of the element with flat row-major index i of a view.
// Built by make_indexers, which drops size-1 axes and merges axes that are
// contiguous in every operand, so most views end up rank 1 or 2.
struct StridedIndexer {
  int rank = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
  int64_t offset = 0;

  __host__ __device__ int64_t operator()(int64_t i) const {
    int64_t off = offset;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t q = i / sizes[d];
      off += (i - q * sizes[d]) * strides[d];
      i = q;
    }
    return off;
  }
};

// Indexers for views of one `shape` with the given strides and offsets
// (dimensions coalesced jointly). Throws gpipe::Error if more than kMaxDims
// axes remain after coalescing.
inline std::vector<StridedIndexer> make_indexers(
    const Shape& shape, const std::vector<const std::vector<int64_t>*>& strides,
    const std::vector<int64_t>& offsets) {
  std::vector<int64_t> sizes;
  std::vector<std::vector<int64_t>> st(strides.size());
  for (int64_t d = 0; d < shape.rank(); ++d) {
    if (shape[d] == 1) continue;
    const bool merge = !sizes.empty() && [&] {
      for (size_t k = 0; k < strides.size(); ++k)
        if (st[k].back() != (*strides[k])[d] * shape[d]) return false;
      return true;
    }();
    if (merge) {
      sizes.back() *= shape[d];
      for (size_t k = 0; k < strides.size(); ++k) st[k].back() = (*strides[k])[d];
    } else {
      sizes.push_back(shape[d]);
      for (size_t k = 0; k < strides.size(); ++k) st[k].push_back((*strides[k])[d]);
    }
  }
  GPIPE_CHECK(static_cast<int>(sizes.size()) <= kMaxDims, "CUDA kernels handle views of at most ",
              kMaxDims, " non-mergeable axes; got shape ", shape);
  std::vector<StridedIndexer> out(strides.size());
  for (size_t k = 0; k < strides.size(); ++k) {
    out[k].rank = static_cast<int>(sizes.size());
    out[k].offset = offsets[k];
    for (size_t d = 0; d < sizes.size(); ++d) {
      out[k].sizes[d] = sizes[d];
      out[k].strides[d] = st[k][d];
    }
  }
  return out;
}

// Indexers for tensors that are views of one shape (the first tensor's).
inline std::vector<StridedIndexer> make_indexers(std::initializer_list<const Tensor*> views) {
  std::vector<const std::vector<int64_t>*> strides;
  std::vector<int64_t> offsets;
  for (const Tensor* t : views) {
    strides.push_back(&t->strides());
    offsets.push_back(t->offset());
  }
  return make_indexers((*views.begin())->shape(), strides, offsets);
}

// Base pointer of a view's storage, typed (element offsets come from an indexer).
template <class T>
T* storage_ptr(const Tensor& t) {
  return static_cast<T*>(t.storage()->data());
}

}  // namespace gpipe::cuda
