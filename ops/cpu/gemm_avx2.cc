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
#include "ops/cpu/gemm_direct_a.inc"
#include "ops/cpu/gemm_epilogue.inc"
#include "ops/cpu/gemm_pack_avx.inc"
#include "ops/cpu/gemm_pack_bf16.inc"

constexpr int kMr = 6, kNr = 16;
// B's cache line 8 steps of k ahead, as the AVX-512 kernel does (there the
// reason); forced AVX2 on the Intel Xeon: +3-5%. Not measured on AMD.
constexpr int kPrefetchB = 8;

// The first R rows' FMAs over kc, into acc (prefetching those rows of C
// first); the full tile is R = 6, a direct A's short last panel fewer (Note
// [Direct A] in gemm_kernels.h), with the same FMAs per element.
template <int R, class A>
__attribute__((always_inline)) inline void tile_sums(int64_t kc, A a, const float* b,
                                                     const float* c, int64_t ldc, __m256 acc[][2]) {
#pragma GCC unroll 6
  for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
#pragma GCC unroll 6
  for (int i = 0; i < R; ++i) _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
  for (int64_t p = 0; p < kc; ++p) {
    _mm_prefetch(reinterpret_cast<const char*>(b + kPrefetchB * kNr), _MM_HINT_T0);
    const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
#pragma GCC unroll 6
    for (int i = 0; i < R; ++i) {
      const __m256 ai = _mm256_set1_ps(a.at(i));
      acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
    }
    a.step();
    b += kNr;
  }
}

// alpha * acc + beta * C (beta == 0 does not read C).
__attribute__((always_inline)) inline __m256 scaled(__m256 acc, const float* ci, float alpha,
                                                    float beta) {
  if (beta == 0.0f) return _mm256_mul_ps(_mm256_set1_ps(alpha), acc);
  return _mm256_fmadd_ps(_mm256_set1_ps(alpha), acc,
                         _mm256_mul_ps(_mm256_set1_ps(beta), _mm256_loadu_ps(ci)));
}

template <int R>
__attribute__((always_inline)) inline void tile_store(__m256 acc[][2], float* c, int64_t ldc,
                                                      float alpha, float beta) {
#pragma GCC unroll 6
  for (int i = 0; i < R; ++i) {
    float* ci = c + i * ldc;
    _mm256_storeu_ps(ci, scaled(acc[i][0], ci, alpha, beta));
    _mm256_storeu_ps(ci + 8, scaled(acc[i][1], ci + 8, alpha, beta));
  }
}

void kernel_6x16(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, float alpha,
                 float beta) {
  __m256 acc[kMr][2];
  tile_sums<kMr>(kc, PackedA<kMr>{a}, b, c, ldc, acc);
  tile_store<kMr>(acc, c, ldc, alpha, beta);
}

// The first R rows from A's rows (Note [Direct A]).
template <int R>
void direct_rows_t(int64_t kc, const float* a, int64_t lda, const float* b, float* c, int64_t ldc,
                   float alpha, float beta) {
  __m256 acc[R][2];
  tile_sums<R>(kc, DirectA<R>(a, lda), b, c, ldc, acc);
  tile_store<R>(acc, c, ldc, alpha, beta);
}

void direct_rows(int rows, int64_t kc, const float* a, int64_t lda, const float* b, float* c,
                 int64_t ldc, float alpha, float beta) {
  using Fn = void (*)(int64_t, const float*, int64_t, const float*, float*, int64_t, float, float);
  static constexpr Fn kFns[kMr + 1] = {nullptr,          direct_rows_t<1>, direct_rows_t<2>,
                                       direct_rows_t<3>, direct_rows_t<4>, direct_rows_t<5>,
                                       direct_rows_t<6>};
  kFns[std::clamp(rows, 1, kMr)](kc, a, lda, b, c, ldc, alpha, beta);
}

// The full tile, the epilogue on its accumulators, one store (Note [Epilogue in
// registers] in gemm_kernels.h); from a packed panel, or A's rows.
template <bool kBias, bool kRelu, bool kResidual>
struct TileWithEpilogue {
  static void store(__m256 acc[][2], float* c, int64_t ldc, float alpha, float beta,
                    const GemmEpilogue& ep, int64_t i0, int64_t j0) {
    const __m256 zero = _mm256_setzero_ps();
    __m256 bias[2] = {zero, zero};
    if constexpr (kBias) {
      bias[0] = _mm256_loadu_ps(ep.bias + j0);
      bias[1] = _mm256_loadu_ps(ep.bias + j0 + 8);
    }
#pragma GCC unroll 6
    for (int i = 0; i < kMr; ++i) {
      float* ci = c + i * ldc;
      const float* res = kResidual ? ep.residual + (i0 + i) * ep.ld_residual + j0 : nullptr;
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        __m256 x = scaled(acc[i][h], ci + 8 * h, alpha, beta);
        if constexpr (kBias) x = _mm256_add_ps(x, bias[h]);
        if constexpr (kRelu) x = _mm256_max_ps(x, zero);
        if constexpr (kResidual) x = _mm256_add_ps(x, _mm256_loadu_ps(res + 8 * h));
        _mm256_storeu_ps(ci + 8 * h, x);
      }
    }
  }
  static void run(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, float alpha,
                  float beta, const GemmEpilogue& ep, int64_t i0, int64_t j0) {
    __m256 acc[kMr][2];
    tile_sums<kMr>(kc, PackedA<kMr>{a}, b, c, ldc, acc);
    store(acc, c, ldc, alpha, beta, ep, i0, j0);
  }
  static void run_direct(int64_t kc, const float* a, int64_t lda, const float* b, float* c,
                         int64_t ldc, float alpha, float beta, const GemmEpilogue& ep, int64_t i0,
                         int64_t j0) {
    __m256 acc[kMr][2];
    tile_sums<kMr>(kc, DirectA<kMr>(a, lda), b, c, ldc, acc);
    store(acc, c, ldc, alpha, beta, ep, i0, j0);
  }
};

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
                                avx2::epilogue,
                                nullptr,
                                avx2::kernel_ep_for<avx2::TileWithEpilogue>,
                                avx2::direct_rows,
                                avx2::direct_ep_for<avx2::TileWithEpilogue>};

}  // namespace gpipe::ops::cpu::packed
