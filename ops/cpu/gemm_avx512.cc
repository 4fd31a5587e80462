// AVX-512 micro-kernel: a 14 x 32 tile of C in 28 zmm accumulators. Per step
// of k it loads two vectors of the B panel and broadcasts 14 values of the A
// panel from memory, 28 FMAs for 16 loads: enough independent chains for two
// 512-bit FMA pipes (Intel) and for Zen 4's double-pumped one. Built with
// AVX-512 flags; see Note [GEMM ISA files] in gemm_kernels.h.
#include <immintrin.h>

#include "ops/cpu/gemm_kernels.h"

namespace gpipe::ops::cpu::packed {
namespace avx512 {
namespace {

#include "ops/cpu/gemm_epilogue.inc"
#include "ops/cpu/gemm_pack_avx.inc"
#include "ops/cpu/gemm_pack_bf16.inc"
#include "ops/cpu/gemm_tile_avx512.inc"

constexpr int kMr = 14, kNr = 32;

void kernel_14x32(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, float alpha,
                  float beta) {
  __m512 acc[kMr][2];
  tile_begin(acc, c, ldc);
  for (int64_t p = 0; p < kc; ++p) {
    const __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
#pragma GCC unroll 14
    for (int i = 0; i < kMr; ++i) {
      const __m512 ai = _mm512_set1_ps(a[i]);
      acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
    }
    a += kMr;
    b += kNr;
  }
  tile_store(acc, c, ldc, alpha, beta);
}

}  // namespace
}  // namespace avx512

const KernelSet kAvx512Kernels = {"avx512",
                                  avx512::kMr,
                                  avx512::kNr,
                                  512,
                                  avx512::kernel_14x32,
                                  avx512::pack_transposed_avx,
                                  avx512::pack_copy_avx,
                                  avx512::pack_transposed_bf16,
                                  avx512::pack_copy_bf16,
                                  avx512::epilogue};

}  // namespace gpipe::ops::cpu::packed
