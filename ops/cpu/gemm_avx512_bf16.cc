// AVX512_BF16 micro-kernel: a 14 x 32 tile of C in 28 zmm accumulators, as
// the float32 AVX-512 kernel, but each vdpbf16ps consumes two steps of k
// (a pair of bfloat16 per 32-bit lane), so one instruction does the work of
// two FMAs. Built with AVX512_BF16 flags and called only when the CPU has
// them (core/cpu_isa.h cpu_bf16_dot); see Note [GEMM ISA files] in
// gemm_kernels.h.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "ops/cpu/gemm_kernels.h"

namespace gpipe::ops::cpu::packed {
namespace avx512_bf16 {
namespace {

#include "ops/cpu/gemm_tile_avx512.inc"
#include "ops/cpu/transpose8_avx.inc"

constexpr int kMr = 14, kNr = 32;

inline __m512bh as_bh(__m512i v) { return reinterpret_cast<__m512bh&>(v); }

void kernel_14x32(int64_t kc, const uint16_t* a, const uint16_t* b, float* c, int64_t ldc,
                  float alpha, float beta) {
  __m512 acc[kMr][2];
  tile_begin(acc, c, ldc);
  for (int64_t p = 0; p < kc; p += 2) {
    const __m512bh b0 = as_bh(_mm512_load_si512(b)), b1 = as_bh(_mm512_load_si512(b + 32));
#pragma GCC unroll 14
    for (int i = 0; i < kMr; ++i) {
      int32_t pair;
      std::memcpy(&pair, a + 2 * i, 4);
      const __m512bh ai = as_bh(_mm512_set1_epi32(pair));
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], ai, b0);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], ai, b1);
    }
    a += 2 * kMr;
    b += 2 * kNr;
  }
  tile_store(acc, c, ldc, alpha, beta);
}

// Note [Masked pair packing]. The panels' rows are 14 lanes (A) or 32 (B)
// wide, and the plain packers moved what a whole vector did not cover one
// pair at a time: a 14-lane A panel was 6 scalar rows out of 14 (pack_rows)
// or scalar altogether (pack_cols), some 10% of a bf16 W2 step. With
// AVX-512's masks every part of a panel takes the vector path: loads masked
// to the lanes and depth there are (what they leave is zero, which is also
// the odd depth's pad and the lanes past the source's), stores masked to the
// panel's width. Masked-off elements are neither read nor written
// (gemm_pack_test checks both packers against their definitions).

// Mask of the low `n` 16-bit elements of a 256-bit vector, n in [0, 16].
inline __mmask16 low16(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1u);
}

// Element (r, p) at src[r * ld + p]: each pair is adjacent in the source, so
// the panel is a transpose of 32-bit words, 8 rows by 8 pairs at a time.
void pack_rows(const uint16_t* src, int64_t ld, int64_t lanes, int64_t kc, uint16_t* dst,
               int64_t stride) {
  const int64_t pairs = (kc + 1) / 2;  // the last one padded with a zero for an odd kc
  for (int64_t r = 0; r < stride; r += 8) {
    const int64_t rows = std::clamp<int64_t>(lanes - r, 0, 8);
    const __mmask8 width = static_cast<__mmask8>((1u << std::min<int64_t>(8, stride - r)) - 1u);
    for (int64_t q = 0; q < pairs; q += 8) {
      const __mmask16 in = low16(kc - 2 * q);
      __m256i v[8];
      for (int i = 0; i < 8; ++i)
        v[i] = i < rows ? _mm256_maskz_loadu_epi16(in, src + (r + i) * ld + 2 * q)
                        : _mm256_setzero_si256();
      transpose8_epi32(v);
      const int64_t out = std::min<int64_t>(8, pairs - q);
      for (int j = 0; j < out; ++j)
        _mm256_mask_storeu_epi32(dst + (q + j) * 2 * stride + 2 * r, width, v[j]);
    }
  }
}

// Element (r, p) at src[p * ld + r]: interleave rows p and p + 1, 16 lanes
// at a time.
void pack_cols(const uint16_t* src, int64_t ld, int64_t lanes, int64_t kc, uint16_t* dst,
               int64_t stride) {
  for (int64_t p = 0; p < kc; p += 2) {
    const uint16_t* s0 = src + p * ld;
    const bool second = p + 1 < kc;  // else the pad: zeros
    uint16_t* d = dst + p * stride;  // (p / 2) * 2 * stride
    for (int64_t r = 0; r < stride; r += 16) {
      const __mmask16 in = low16(std::clamp<int64_t>(lanes - r, 0, 16));
      const __m256i x0 = _mm256_maskz_loadu_epi16(in, s0 + r);
      const __m256i x1 =
          second ? _mm256_maskz_loadu_epi16(in, s0 + ld + r) : _mm256_setzero_si256();
      const __m256i lo = _mm256_unpacklo_epi16(x0, x1), hi = _mm256_unpackhi_epi16(x0, x1);
      // unpack works within 128-bit lanes: reorder to lanes 0-3, 4-7, 8-11, 12-15.
      const int64_t w0 = std::clamp<int64_t>(stride - r, 0, 8),
                    w1 = std::clamp<int64_t>(stride - r - 8, 0, 8);
      _mm256_mask_storeu_epi16(d + 2 * r, low16(2 * w0), _mm256_permute2x128_si256(lo, hi, 0x20));
      _mm256_mask_storeu_epi16(d + 2 * r + 16, low16(2 * w1),
                               _mm256_permute2x128_si256(lo, hi, 0x31));
    }
  }
}

}  // namespace
}  // namespace avx512_bf16

const Bf16DotKernelSet kAvx512Bf16Kernels = {"avx512-bf16",
                                             avx512_bf16::kMr,
                                             avx512_bf16::kNr,
                                             512,
                                             avx512_bf16::kernel_14x32,
                                             avx512_bf16::pack_rows,
                                             avx512_bf16::pack_cols,
                                             avx512_bf16::pack_rows,
                                             avx512_bf16::pack_cols,
                                             2,
                                             nullptr,
                                             nullptr};

}  // namespace gpipe::ops::cpu::packed
