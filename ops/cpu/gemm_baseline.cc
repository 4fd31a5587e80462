// Portable micro-kernel for x86-64-v2 CPUs (SSE, no FMA): a 4 x 8 tile of C
// in 8 xmm accumulators, multiply then add. Built with -march=x86-64-v2 so
// it runs on any x86-64-v2 CPU whatever the global -march; see
// Note [GEMM ISA files] in gemm_kernels.h.
#include <emmintrin.h>
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "core/rng.h"
#include "ops/cpu/gemm_kernels.h"

namespace gpipe::ops::cpu::packed {
namespace baseline {
namespace {

#include "ops/cpu/philox_vec.inc"
// (after philox_vec.inc: the dropout uses its uniforms)
#include "ops/cpu/gemm_epilogue.inc"
#include "ops/cpu/gemm_pack_bf16.inc"

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

// dst[p * stride + r] = src[r * ld + p] for r < lanes, p < kc: the transposing
// copy both op(A) = A and op(B) = B^T need. 4 x 4 blocks go through SSE
// registers (x86-64 baseline), the rest element by element.
void pack_transposed_sse(const float* src, int64_t ld, int64_t lanes, int64_t kc, float* dst,
                         int64_t stride) {
  int64_t r = 0;
  for (; r + 4 <= lanes; r += 4) {
    const float* s0 = src + r * ld;
    const float *s1 = s0 + ld, *s2 = s1 + ld, *s3 = s2 + ld;
    int64_t p = 0;
    for (; p + 4 <= kc; p += 4) {
      __m128 v0 = _mm_loadu_ps(s0 + p), v1 = _mm_loadu_ps(s1 + p);
      __m128 v2 = _mm_loadu_ps(s2 + p), v3 = _mm_loadu_ps(s3 + p);
      _MM_TRANSPOSE4_PS(v0, v1, v2, v3);
      float* d = dst + p * stride + r;
      _mm_storeu_ps(d, v0);
      _mm_storeu_ps(d + stride, v1);
      _mm_storeu_ps(d + 2 * stride, v2);
      _mm_storeu_ps(d + 3 * stride, v3);
    }
    for (; p < kc; ++p) {
      float* d = dst + p * stride + r;
      d[0] = s0[p], d[1] = s1[p], d[2] = s2[p], d[3] = s3[p];
    }
  }
  for (; r < lanes; ++r)
    for (int64_t p = 0; p < kc; ++p) dst[p * stride + r] = src[r * ld + p];
}

// dst[p * stride + r] = src[p * ld + r] for r < lanes, zero for lanes <= r < stride.
// Panels are 14-32 floats wide: a memcpy call per row costs more than the
// copy, so rows move through SSE registers (which the compiler does not turn
// back into a memcpy call).
void pack_copy_sse(const float* src, int64_t ld, int64_t lanes, int64_t kc, float* dst,
                   int64_t stride) {
  for (int64_t p = 0; p < kc; ++p) {
    float* d = dst + p * stride;
    const float* s = src + p * ld;
    int64_t r = 0;
    for (; r + 4 <= lanes; r += 4) _mm_storeu_ps(d + r, _mm_loadu_ps(s + r));
    for (; r < lanes; ++r) d[r] = s[r];
    for (; r < stride; ++r) d[r] = 0.0f;
  }
}

}  // namespace
}  // namespace baseline

const KernelSet kBaselineKernels = {"baseline",
                                    baseline::kMr,
                                    baseline::kNr,
                                    256,
                                    baseline::kernel_4x8,
                                    baseline::pack_transposed_sse,
                                    baseline::pack_copy_sse,
                                    baseline::pack_transposed_bf16,
                                    baseline::pack_copy_bf16,
                                    baseline::epilogue};

}  // namespace gpipe::ops::cpu::packed
