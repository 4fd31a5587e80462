// AVX-512 micro-kernel: a 14 x 32 tile of C in 28 zmm accumulators. Per step
// of k it loads two vectors of the B panel and broadcasts 14 values of the A
// panel from memory, 28 FMAs for 16 loads: enough independent chains for two
// 512-bit FMA pipes (Intel) and for Zen 4's double-pumped one. Built with
// AVX-512 flags; see Note [GEMM ISA files] in gemm_kernels.h.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "core/rng.h"
#include "ops/cpu/gemm_kernels.h"

namespace gpipe::ops::cpu::packed {
namespace avx512 {
namespace {

#include "ops/cpu/philox_vec.inc"
// (after philox_vec.inc: the dropout uses its uniforms)
#include "ops/cpu/gemm_direct_a.inc"
#include "ops/cpu/gemm_epilogue.inc"
#include "ops/cpu/gemm_pack_avx512.inc"
#include "ops/cpu/gemm_pack_bf16.inc"
#include "ops/cpu/gemm_tile_avx512.inc"

constexpr int kMr = 14, kNr = 32;
// Each step of k prefetches the B panel's two cache lines 8 steps ahead
// (past the panel's end: the next panel's, which the block runs next). The
// panel streams from L2 (Note [GEMM blocking]); on an Intel Xeon with two
// 512-bit FMA pipes (240 GF/s a core) the hardware prefetchers alone left
// the kernel waiting: +3-12% on W1's shapes at 1 and 2 threads (distances
// 8 and 16 alike, 32 less). Not measured on AMD.
constexpr int kPrefetchB = 8;

// The first R rows of the 14 x 32 tile: all of them (kernel_14x32), or a
// short last panel's (Note [Short panels] in gemm_kernels.h), with the same
// FMAs per element.
template <int R, class A>
__attribute__((always_inline)) inline void tile_sums(int64_t kc, A a, const float* b,
                                                     __m512 acc[][2]) {
  for (int64_t p = 0; p < kc; ++p) {
    _mm_prefetch(reinterpret_cast<const char*>(b + kPrefetchB * kNr), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(b + kPrefetchB * kNr + 16), _MM_HINT_T0);
    const __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
#pragma GCC unroll 14
    for (int i = 0; i < R; ++i) {
      const __m512 ai = _mm512_set1_ps(a.at(i));
      acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
    }
    a.step();
    b += kNr;
  }
}

template <int R>
void kernel_rows_t(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, float alpha,
                   float beta) {
  __m512 acc[R][2];
  tile_begin<R>(acc, c, ldc);
  tile_sums<R>(kc, PackedA<kMr>{a}, b, acc);
  tile_store<R>(acc, c, ldc, alpha, beta);
}

// The same from A's rows (Note [Direct A]).
template <int R>
void direct_rows_t(int64_t kc, const float* a, int64_t lda, const float* b, float* c, int64_t ldc,
                   float alpha, float beta) {
  __m512 acc[R][2];
  tile_begin<R>(acc, c, ldc);
  tile_sums<R>(kc, DirectA<R>(a, lda), b, acc);
  tile_store<R>(acc, c, ldc, alpha, beta);
}

// The full tile, the epilogue on its accumulators, one store (Note [Epilogue in
// registers] in gemm_kernels.h); from a packed panel or A's rows.
template <bool kBias, bool kRelu, bool kResidual>
struct TileWithEpilogue {
  static void run(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, float alpha,
                  float beta, const GemmEpilogue& ep, int64_t i0, int64_t j0) {
    __m512 acc[kMr][2];
    tile_begin<kMr>(acc, c, ldc);
    tile_sums<kMr>(kc, PackedA<kMr>{a}, b, acc);
    tile_store_epilogue<kBias, kRelu, kResidual>(acc, c, ldc, alpha, beta, ep, i0, j0);
  }
  static void run_direct(int64_t kc, const float* a, int64_t lda, const float* b, float* c,
                         int64_t ldc, float alpha, float beta, const GemmEpilogue& ep, int64_t i0,
                         int64_t j0) {
    __m512 acc[kMr][2];
    tile_begin<kMr>(acc, c, ldc);
    tile_sums<kMr>(kc, DirectA<kMr>(a, lda), b, acc);
    tile_store_epilogue<kBias, kRelu, kResidual>(acc, c, ldc, alpha, beta, ep, i0, j0);
  }
};

void kernel_14x32(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, float alpha,
                  float beta) {
  kernel_rows_t<kMr>(kc, a, b, c, ldc, alpha, beta);
}

void kernel_rows(int rows, int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                 float alpha, float beta) {
  using Fn = void (*)(int64_t, const float*, const float*, float*, int64_t, float, float);
  static constexpr Fn kFns[kMr] = {
      kernel_14x32,      kernel_rows_t<1>,  kernel_rows_t<2>,  kernel_rows_t<3>, kernel_rows_t<4>,
      kernel_rows_t<5>,  kernel_rows_t<6>,  kernel_rows_t<7>,  kernel_rows_t<8>, kernel_rows_t<9>,
      kernel_rows_t<10>, kernel_rows_t<11>, kernel_rows_t<12>, kernel_rows_t<13>};
  kFns[rows > 0 && rows < kMr ? rows : 0](kc, a, b, c, ldc, alpha, beta);
}

void direct_rows(int rows, int64_t kc, const float* a, int64_t lda, const float* b, float* c,
                 int64_t ldc, float alpha, float beta) {
  using Fn = void (*)(int64_t, const float*, int64_t, const float*, float*, int64_t, float, float);
  static constexpr Fn kFns[kMr + 1] = {nullptr,           direct_rows_t<1>,  direct_rows_t<2>,
                                       direct_rows_t<3>,  direct_rows_t<4>,  direct_rows_t<5>,
                                       direct_rows_t<6>,  direct_rows_t<7>,  direct_rows_t<8>,
                                       direct_rows_t<9>,  direct_rows_t<10>, direct_rows_t<11>,
                                       direct_rows_t<12>, direct_rows_t<13>, direct_rows_t<14>};
  kFns[std::clamp(rows, 1, kMr)](kc, a, lda, b, c, ldc, alpha, beta);
}

}  // namespace
}  // namespace avx512

const KernelSet kAvx512Kernels = {"avx512",
                                  avx512::kMr,
                                  avx512::kNr,
                                  512,
                                  avx512::kernel_14x32,
                                  avx512::pack_transposed_avx512,
                                  avx512::pack_copy_avx512,
                                  avx512::pack_transposed_bf16,
                                  avx512::pack_copy_bf16,
                                  avx512::epilogue,
                                  avx512::kernel_rows,
                                  avx512::kernel_ep_for<avx512::TileWithEpilogue>,
                                  avx512::direct_rows,
                                  avx512::direct_ep_for<avx512::TileWithEpilogue>};

}  // namespace gpipe::ops::cpu::packed
