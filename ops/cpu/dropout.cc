// Dropout CPU kernel. The flat index range is cut into chunks processed in
// parallel; each chunk draws its uniforms as philox_uniform(key, lo, ...)
// would (vectorised: Note [Vector Philox]),
// i.e. at its own element offset, into a small stack buffer and applies the
// keep test and the 1 / (1 - p) scale. Philox is counter-based, so the mask
// bits are identical however the range is chunked. Uniforms are always
// float32 draws, so float32 and float64 tensors see the same mask.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/rng.h"
#include "ops/cpu/isa/prelude.h"  // this file is built per ISA level: Note [CPU ISA kernels]
#include "ops/dropout_kernels.h"

namespace gpipe::ops::cpu::GPIPE_ISA_NS {
namespace {

constexpr int64_t kBlock = 1024;
constexpr int64_t kGrainElems = 1 << 15;

#include "ops/cpu/philox_vec.inc"

// philox_uniform(key, offset, u, n): whole groups of kLanes blocks through
// philox_lanes, the unaligned head and tail through core/rng.cc's.
void uniforms(uint64_t key, uint64_t offset, float* u, int64_t n) {
  int64_t i = 0;
#if defined(__AVX2__)
  i = std::min<int64_t>(
      n, (kLaneElems - static_cast<int64_t>(offset % kLaneElems)) % kLaneElems);  // the head
  if (i > 0) philox_uniform(key, offset, u, i);
  for (; i + kLaneElems <= n; i += kLaneElems)
    philox_lanes(key, (offset + static_cast<uint64_t>(i)) / 4, u + i);
#endif
  if (i < n) philox_uniform(key, offset + static_cast<uint64_t>(i), u + i, n - i);
}

void dropout_apply_cpu(const Tensor& x, double p, uint64_t key, Tensor& out) {
  dispatch_floating(x.dtype(), "dropout", [&](auto z) {
    using T = decltype(z);
    const T* px = x.data<T>();
    T* po = out.data<T>();
    const T scale = static_cast<T>(1.0 / (1.0 - p));
    const float threshold = dropout_keep_threshold(p);
    parallel_for(0, x.numel(), kGrainElems, [&](int64_t lo, int64_t hi) {
      float u[kBlock];
      for (int64_t b = lo; b < hi; b += kBlock) {
        const int64_t n = std::min(kBlock, hi - b);
        uniforms(key, static_cast<uint64_t>(b), u, n);
        for (int64_t i = 0; i < n; ++i) po[b + i] = u[i] >= threshold ? px[b + i] * scale : T(0);
      }
    });
  });
}

}  // namespace

GPIPE_ISA_KERNEL(dropout_apply, dropout_apply_cpu);

}  // namespace gpipe::ops::cpu::GPIPE_ISA_NS
