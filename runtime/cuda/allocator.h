// The CUDA caching allocator behind Tensor::empty(..., cuda:i).
//
// Registered for DeviceType::kCUDA with register_allocator_factory when the
// CUDA runtime is linked (//runtime/cuda). Asking for cuda:i on a machine
// without a GPU throws gpipe::Error "cuda:i is not available: no CUDA device
// found (...)". Statistics (Allocator::stats) count the bytes tensors asked
// for, per MemoryCategory, exactly like the CPU allocator; the bytes the cache
// holds on top of that are in cache_stats.
//
// See Note [CUDA caching allocator] in allocator.cc for size classes, reuse
// and the per-stream rule.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/device.h"

namespace gpipe::cuda {

// Marks that the block holding `ptr` (a live allocation on `device`) is also
// used by `stream`, which is not the compute stream it was allocated on. When
// the block is freed it is not reused until the work queued on `stream` so
// far has finished. Cross-device copies call this for their copy stream.
void record_stream(Device device, const void* ptr, cudaStream_t stream);

struct CacheStats {
  int64_t reserved_bytes = 0;  // obtained from cudaMalloc and not yet returned
  int64_t cached_bytes = 0;    // reserved but not backing a live tensor
  int64_t segments = 0;        // cudaMalloc'ed blocks
  int64_t cuda_mallocs = 0;    // cudaMalloc calls so far (cache misses)
};
CacheStats cache_stats(int device);

// Returns every cached (free, no longer in use) block of `device` to CUDA.
void empty_cache(int device);

// Rounds a request up to its size class (exposed for tests).
size_t round_size(size_t bytes);

}  // namespace gpipe::cuda
