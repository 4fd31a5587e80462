// Single-threaded GEMM on raw row-major buffers for CPU kernels.
//
// C[m,n] = alpha * op(A)[m,k] * op(B)[k,n] + beta * C, where op transposes
// when ta/tb is set and lda/ldb/ldc are row strides as stored; beta == 0
// overwrites C without reading it. Backends, selected process-wide with
// set_gemm_backend (the benchmark compares them):
//   kPacked  (default) gpipe's own packed GEMM (gemm_packed.h), with the
//            micro-kernel for the CPU's ISA level (core/cpu_isa.h); float
//            only: double goes to OpenBLAS.
//   kBlas    OpenBLAS, kept single-threaded: gpipe parallelises over its own
//            intra-op pool so each pipeline device stays within its budget.
//   kEigen   Eigen's GEMM, the reference.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ops/cpu/gemm_kernels.h"

namespace gpipe::ops::cpu {

using packed::GemmEpilogue;

enum class GemmBackend { kPacked, kBlas, kEigen };
void set_gemm_backend(GemmBackend backend);
GemmBackend gemm_backend();
// The backend the next float GEMM takes, e.g. "packed-avx512", "openblas", "eigen".
std::string_view gemm_backend_name();
// One line for logs and benchmark headers: the CPU, the instruction-set
// level the kernels use and the float GEMM path, e.g.
// "AMD EPYC; supports avx512, avx2, baseline | kernels: avx512 | float GEMM:
// packed-avx512, products under 16 MFLOP: eigen". Throws gpipe::Error if
// GPIPE_CPU_ISA or GPIPE_GEMM names something unusable.
std::string compute_description();

template <class T>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
          const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

// The same product split over the calling thread's intra-op pool (by rows of
// C, or by columns when m is small); small products run on the caller.
template <class T>
void parallel_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                   int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

// C = op(A) op(B) + beta * C by the packed GEMM whatever its size (where the
// packed backend is active; the other backends as gemm), over the intra-op
// pool when `parallel`. Its sums depend neither on the thread count nor on
// how a caller splits C's rows into separate products, while parallel_gemm
// hands small products to Eigen, split by rows over the pool. (No alpha: a
// row split makes short panels, whose tile goes through a scratch where
// alpha and beta round apart, unlike the full tile's fused alpha * acc +
// beta * C at the AVX2 level; with alpha 1 the two round alike.) For kernels
// that deal a product's rows to their own tasks; tests/ops/gemm_stable_test.cc.
void stable_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float beta, float* c, int64_t ldc, bool parallel);
// C = epilogue(op(A) op(B)) over the intra-op pool (Note [GEMM epilogue] in
// gemm_kernels.h: act(C + bias) + residual): in the packed GEMM's tiles
// while they are in cache, or (other backends, small products) as a pass
// after the product, with the same bits either way.
void parallel_gemm_epilogue(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a,
                            int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                            const GemmEpilogue& epilogue);

// bfloat16 operands (raw bits), float32 C, over the intra-op pool when
// `parallel` (packed_gemm_bf16 in gemm_packed.h: AVX512_BF16 dot products
// where the CPU has them, else widened to float32 while packing).
void gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
               int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc,
               bool parallel);
// The same with a bfloat16 result (Note [bfloat16 results] in
// gemm_kernels.h): epilogue.bf16_out gets round(op(A) op(B)), bias and ReLU
// as that note says; alpha 1, no C.
void gemm_bf16_out(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const uint16_t* a,
                   int64_t lda, const uint16_t* b, int64_t ldb, const GemmEpilogue& epilogue,
                   bool parallel);
// The bfloat16 GEMM path in use: "avx512-bf16" or "bf16-convert-<level>".
std::string bf16_gemm_description();

}  // namespace gpipe::ops::cpu
