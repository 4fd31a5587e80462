// AMX-BF16 micro-kernel and its A-panel packing: a 32 x 32 tile of C in four
// AMX tiles, each tdpbf16ps a 16 x 16 x 32 product (8192 bfloat16 pairs'
// worth of vdpbf16ps lanes in one instruction). Built with AVX-512 and AMX
// flags and called only where cpu_amx() (core/cpu_isa.h: the CPU has
// AMX-BF16 and Linux granted tile data, Note [AMX tiles] there); see Note
// [GEMM ISA files] in gemm_kernels.h. The packers use AVX-512 only, so the
// tests run them, and the tile program through its emulation
// (gemm_amx_emulated.cc), on any AVX-512 CPU.
//
// Note [AMX panels]. An A tile is 16 rows of 32 bfloat16 of depth (row m's
// pair k is its dword k), a B tile 16 pair rows of 16 columns (dword n of
// row k holds column n's depths 2k and 2k + 1), and tileloadd reads either
// from memory rows any stride apart. So B panels keep the AVX512_BF16
// kernel's pair-interleaved layout (a 32-column panel is two B tiles side
// by side, 128 bytes a pair row), and A panels are row-major, 32 rows of
// the packed depth each: a tile is 16 rows at a stride of that depth. The
// depth is padded with zeros to a multiple of 32, one tile's.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "ops/cpu/gemm_kernels.h"

namespace gpipe::ops::cpu::packed {
namespace amx {
namespace {

#define AMX_ZERO(t) _tile_zero(t)
#define AMX_LOAD(t, p, s) _tile_loadd(t, p, s)
#define AMX_STORE(t, p, s) _tile_stored(t, p, s)
#define AMX_DP(c, a, b) _tile_dpbf16ps(c, a, b)

struct TileConfig;
// The configuration is a static constant (LDTILECFG's asm names only its
// first bytes as an operand; a constant is never written before it).
void amx_configure(const TileConfig& cfg) { _tile_loadconfig(&cfg); }
void amx_release() { _tile_release(); }

#include "ops/cpu/gemm_amx_tile.inc"

int64_t padded(int64_t kc) { return (kc + kTileDepth - 1) / kTileDepth * kTileDepth; }

// Element (r, p) at src[r * ld + p]: each row's depth is contiguous.
void pack_a_rows(const uint16_t* src, int64_t ld, int64_t lanes, int64_t kc, uint16_t* dst,
                 int64_t stride) {
  const int64_t depth = padded(kc);
  for (int64_t r = 0; r < stride; ++r) {
    uint16_t* d = dst + r * depth;
    const int64_t copied = r < lanes ? kc : 0;
    if (copied > 0) std::memcpy(d, src + r * ld, static_cast<size_t>(copied) * 2);
    std::memset(d + copied, 0, static_cast<size_t>(depth - copied) * 2);
  }
}

#include "ops/cpu/transpose8_avx.inc"

// Element (r, p) at src[p * ld + r]: 8 lanes by 8 pairs at a time, depths
// 2q and 2q + 1 interleaved into pairs (one dword per lane), then the
// 8 x 8 dwords transposed so each lane's pairs lie along its row. The lanes
// run inside the pairs, so the 16 source rows of 8 pairs are read whole
// (a 32-lane panel's row is one cache line) before the next 16.
void pack_a_cols(const uint16_t* src, int64_t ld, int64_t lanes, int64_t kc, uint16_t* dst,
                 int64_t stride) {
  const int64_t depth = padded(kc);
  for (int64_t q0 = 0; q0 < depth / 2; q0 += 8) {
    for (int64_t r0 = 0; r0 < stride; r0 += 8) {
      const int64_t in_lanes = std::clamp<int64_t>(lanes - r0, 0, 8);
      const __mmask8 in = static_cast<__mmask8>((1u << in_lanes) - 1u);
      const int64_t out_rows = std::min<int64_t>(8, stride - r0);
      __m256i v[8];
      for (int i = 0; i < 8; ++i) {
        const int64_t p = 2 * (q0 + i);
        const __m128i x0 =
            p < kc ? _mm_maskz_loadu_epi16(in, src + p * ld + r0) : _mm_setzero_si128();
        const __m128i x1 =
            p + 1 < kc ? _mm_maskz_loadu_epi16(in, src + (p + 1) * ld + r0) : _mm_setzero_si128();
        v[i] = _mm256_set_m128i(_mm_unpackhi_epi16(x0, x1), _mm_unpacklo_epi16(x0, x1));
      }
      transpose8_epi32(v);
      for (int j = 0; j < out_rows; ++j)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + (r0 + j) * depth + 2 * q0), v[j]);
    }
  }
}

// B panels: the AVX512_BF16 pair packing, then zero pair rows to the
// padded depth.
void zero_pairs(int64_t kc, uint16_t* dst, int64_t stride) {
  const int64_t first = (kc + 1) / 2, last = padded(kc) / 2;
  std::memset(dst + first * 2 * stride, 0, static_cast<size_t>((last - first) * 2 * stride) * 2);
}
void pack_b_rows(const uint16_t* src, int64_t ld, int64_t lanes, int64_t kc, uint16_t* dst,
                 int64_t stride) {
  kAvx512Bf16Kernels.pack_rows(src, ld, lanes, kc, dst, stride);
  zero_pairs(kc, dst, stride);
}
void pack_b_cols(const uint16_t* src, int64_t ld, int64_t lanes, int64_t kc, uint16_t* dst,
                 int64_t stride) {
  kAvx512Bf16Kernels.pack_cols(src, ld, lanes, kc, dst, stride);
  zero_pairs(kc, dst, stride);
}

}  // namespace
}  // namespace amx

// kc_cap 512; the A and B panels share L1 (Note [Tile kernels' blocking] in
// gemm_blocking.cc): kc 256 on a 48 KB L1d.
const Bf16DotKernelSet kAmxBf16Kernels = {"amx-bf16",
                                          amx::kMr,
                                          amx::kNr,
                                          512,
                                          amx::kernel_32x32,
                                          amx::pack_b_rows,
                                          amx::pack_b_cols,
                                          amx::pack_a_rows,
                                          amx::pack_a_cols,
                                          amx::kTileDepth,
                                          amx::tiles_begin,
                                          amx::tiles_end,
                                          /*b_panel_in_l1=*/true};

}  // namespace gpipe::ops::cpu::packed
