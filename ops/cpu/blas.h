// Single-threaded GEMM on raw row-major buffers for CPU kernels.
//
// C[m,n] = alpha * op(A)[m,k] * op(B)[k,n] + beta * C, where op transposes
// when ta/tb is set and lda/ldb/ldc are row strides as stored. Backed by
// OpenBLAS (kept single-threaded: gpipe parallelises over its own intra-op
// pool so each pipeline device stays within its thread budget) or by Eigen,
// selected process-wide with set_gemm_backend (the benchmark compares both).
#pragma once

#include <cstdint>
#include <string_view>

namespace gpipe::ops::cpu {

enum class GemmBackend { kBlas, kEigen };
void set_gemm_backend(GemmBackend backend);
GemmBackend gemm_backend();
std::string_view gemm_backend_name();

template <class T>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
          const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

// The same product split over the calling thread's intra-op pool (by rows of
// C, or by columns when m is small).
template <class T>
void parallel_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                   int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

}  // namespace gpipe::ops::cpu
