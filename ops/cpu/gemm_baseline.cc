// Portable micro-kernel for x86-64-v2 CPUs (SSE, no FMA): a 4 x 8 tile of C
// in 8 xmm accumulators, multiply then add. Built with -march=x86-64-v2 so
// it runs on any x86-64-v2 CPU whatever the global -march; see
// Note [GEMM ISA files] in gemm_kernels.h.
#include <emmintrin.h>

#include "ops/cpu/gemm_kernels.h"

namespace gpipe::ops::cpu::packed {
namespace baseline {
namespace {

constexpr int kMr = 4, kNr = 8;

void kernel_4x8(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, float alpha,
                float beta) {
  __m128 acc[kMr][2];
#pragma GCC unroll 4
  for (int i = 0; i < kMr; ++i) acc[i][0] = acc[i][1] = _mm_setzero_ps();
  for (int64_t p = 0; p < kc; ++p) {
    const __m128 b0 = _mm_load_ps(b), b1 = _mm_load_ps(b + 4);
#pragma GCC unroll 4
    for (int i = 0; i < kMr; ++i) {
      const __m128 ai = _mm_set1_ps(a[i]);
      acc[i][0] = _mm_add_ps(acc[i][0], _mm_mul_ps(ai, b0));
      acc[i][1] = _mm_add_ps(acc[i][1], _mm_mul_ps(ai, b1));
    }
    a += kMr;
    b += kNr;
  }
  const __m128 va = _mm_set1_ps(alpha), vb = _mm_set1_ps(beta);
#pragma GCC unroll 4
  for (int i = 0; i < kMr; ++i) {
    float* ci = c + i * ldc;
    __m128 r0 = _mm_mul_ps(va, acc[i][0]), r1 = _mm_mul_ps(va, acc[i][1]);
    if (beta != 0.0f) {
      r0 = _mm_add_ps(r0, _mm_mul_ps(vb, _mm_loadu_ps(ci)));
      r1 = _mm_add_ps(r1, _mm_mul_ps(vb, _mm_loadu_ps(ci + 4)));
    }
    _mm_storeu_ps(ci, r0);
    _mm_storeu_ps(ci + 4, r1);
  }
}

}  // namespace
}  // namespace baseline

const KernelSet kBaselineKernels = {"baseline", baseline::kMr, baseline::kNr,       256,
                                    1024,       4096,          baseline::kernel_4x8};

}  // namespace gpipe::ops::cpu::packed
