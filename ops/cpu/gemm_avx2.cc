// AVX2 micro-kernel: a 6 x 16 tile of C in 12 ymm accumulators (the classic
// Haswell..Zen shape). Per step of k: two B loads, six A broadcasts, twelve
// FMAs, which keeps two FMA pipes of latency 4-5 busy within 16 registers.
// Built with AVX2+FMA flags; see Note [GEMM ISA files] in gemm_kernels.h.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "core/rng.h"
#include "ops/cpu/gemm_kernels.h"

namespace gpipe::ops::cpu::packed {
namespace avx2 {
namespace {

#include "ops/cpu/philox_vec.inc"
// (after philox_vec.inc: the dropout uses its uniforms)
#include "ops/cpu/gemm_epilogue.inc"
#include "ops/cpu/gemm_pack_avx.inc"
#include "ops/cpu/gemm_pack_bf16.inc"

constexpr int kMr = 6, kNr = 16;

void kernel_6x16(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, float alpha,
                 float beta) {
  __m256 acc[kMr][2];
#pragma GCC unroll 6
  for (int i = 0; i < kMr; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
#pragma GCC unroll 6
  for (int i = 0; i < kMr; ++i)
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
  for (int64_t p = 0; p < kc; ++p) {
    const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
#pragma GCC unroll 6
    for (int i = 0; i < kMr; ++i) {
      const __m256 ai = _mm256_broadcast_ss(a + i);
      acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
    }
    a += kMr;
    b += kNr;
  }
  const __m256 va = _mm256_set1_ps(alpha);
  if (beta == 0.0f) {
#pragma GCC unroll 6
    for (int i = 0; i < kMr; ++i) {
      _mm256_storeu_ps(c + i * ldc, _mm256_mul_ps(va, acc[i][0]));
      _mm256_storeu_ps(c + i * ldc + 8, _mm256_mul_ps(va, acc[i][1]));
    }
  } else {
    const __m256 vb = _mm256_set1_ps(beta);
#pragma GCC unroll 6
    for (int i = 0; i < kMr; ++i) {
      float* ci = c + i * ldc;
      _mm256_storeu_ps(ci, _mm256_fmadd_ps(va, acc[i][0], _mm256_mul_ps(vb, _mm256_loadu_ps(ci))));
      _mm256_storeu_ps(ci + 8,
                       _mm256_fmadd_ps(va, acc[i][1], _mm256_mul_ps(vb, _mm256_loadu_ps(ci + 8))));
    }
  }
}

}  // namespace
}  // namespace avx2

const KernelSet kAvx2Kernels = {"avx2",
                                avx2::kMr,
                                avx2::kNr,
                                256,
                                avx2::kernel_6x16,
                                avx2::pack_transposed_avx,
                                avx2::pack_copy_avx,
                                avx2::pack_transposed_bf16,
                                avx2::pack_copy_bf16,
                                avx2::epilogue};

}  // namespace gpipe::ops::cpu::packed
