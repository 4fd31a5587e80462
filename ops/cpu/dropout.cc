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

// Note [Vector Philox]: Philox4x32-10 (core/philox.h's philox4x32_10) for
// kLanes consecutive blocks at once, one block per vector lane, with explicit
// 32 x 32 -> 64-bit multiplies (the compiler does not vectorise the scalar
// form). Float uniforms map as philox_uniform does: element e is word e % 4
// of block e / 4, top 24 bits. philox_lanes writes the 4 * kLanes uniforms of
// blocks first .. first + kLanes - 1. Without AVX2 (the baseline level)
// kLanes is 0 and everything goes through philox_uniform.
#if defined(__AVX512F__)
using VecU = __m512i;
constexpr int kLanes = 16;
inline VecU vset1(uint32_t x) { return _mm512_set1_epi32(static_cast<int>(x)); }
inline VecU vxor(VecU a, VecU b) { return _mm512_xor_si512(a, b); }
// hi and lo 32 bits of a * m in every lane.
inline void vmul_wide(VecU a, VecU m, VecU& hi, VecU& lo) {
  const VecU pe = _mm512_mul_epu32(a, m), po = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
  const VecU low = _mm512_set1_epi64(0xffffffffll);
  hi = _mm512_or_si512(_mm512_srli_epi64(pe, 32), _mm512_andnot_si512(low, po));
  lo = _mm512_or_si512(_mm512_and_si512(pe, low), _mm512_slli_epi64(po, 32));
}
inline void vstore_unit(VecU c, float* out) {
  _mm512_storeu_ps(out, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(c, 8)),
                                      _mm512_set1_ps(1.0f / 16777216.0f)));
}
#elif defined(__AVX2__)
using VecU = __m256i;
constexpr int kLanes = 8;
inline VecU vset1(uint32_t x) { return _mm256_set1_epi32(static_cast<int>(x)); }
inline VecU vxor(VecU a, VecU b) { return _mm256_xor_si256(a, b); }
inline void vmul_wide(VecU a, VecU m, VecU& hi, VecU& lo) {
  const VecU pe = _mm256_mul_epu32(a, m), po = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
  const VecU low = _mm256_set1_epi64x(0xffffffffll);
  hi = _mm256_or_si256(_mm256_srli_epi64(pe, 32), _mm256_andnot_si256(low, po));
  lo = _mm256_or_si256(_mm256_and_si256(pe, low), _mm256_slli_epi64(po, 32));
}
inline void vstore_unit(VecU c, float* out) {
  _mm256_storeu_ps(out, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(c, 8)),
                                      _mm256_set1_ps(1.0f / 16777216.0f)));
}
#else
constexpr int kLanes = 0;
#endif
constexpr int64_t kLaneElems = 4 * kLanes;

#if defined(__AVX2__)
void philox_lanes(uint64_t key, uint64_t first, float* __restrict u) {
  alignas(64) uint32_t lo_idx[kLanes], hi_idx[kLanes];
  for (int l = 0; l < kLanes; ++l) {
    lo_idx[l] = static_cast<uint32_t>(first + static_cast<uint64_t>(l));
    hi_idx[l] = static_cast<uint32_t>((first + static_cast<uint64_t>(l)) >> 32);
  }
  VecU c0, c1, c2 = vxor(vset1(0), vset1(0)), c3 = c2;
  std::memcpy(&c0, lo_idx, sizeof c0);
  std::memcpy(&c1, hi_idx, sizeof c1);
  const VecU m0 = vset1(0xD2511F53u), m1 = vset1(0xCD9E8D57u);
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    VecU hi0, lo0, hi1, lo1;
    vmul_wide(c0, m0, hi0, lo0);
    vmul_wide(c2, m1, hi1, lo1);
    const VecU n0 = vxor(vxor(hi1, c1), vset1(k0)), n2 = vxor(vxor(hi0, c3), vset1(k1));
    c1 = lo1;
    c3 = lo0;
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  alignas(64) float w[4][kLanes];
  vstore_unit(c0, w[0]);
  vstore_unit(c1, w[1]);
  vstore_unit(c2, w[2]);
  vstore_unit(c3, w[3]);
  for (int l = 0; l < kLanes; ++l)
    for (int j = 0; j < 4; ++j) u[4 * l + j] = w[j][l];
}
#endif

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
    // u >= p in double, as a float threshold: the smallest float u that passes.
    const float threshold = static_cast<float>(p) >= p
                                ? static_cast<float>(p)
                                : std::nextafter(static_cast<float>(p), 2.0f);
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
