// gpipe's own packed fp32 GEMM (internal to ops/cpu; blas.h is the public
// entry). Same contract as ops::cpu::gemm<float>:
//
//   C[m, n] = alpha * op(A)[m, k] * op(B)[k, n] + beta * C
//
// row-major with row strides lda/ldb/ldc as stored (op(A) = A^T when ta, so A
// is then stored k x m). beta == 0 overwrites C without reading it. The
// micro-kernel is chosen per call from gpipe::cpu_isa() (core/cpu_isa.h).
#pragma once

#include <cstdint>

#include "ops/cpu/gemm_kernels.h"

namespace gpipe::ops::cpu {

// parallel: split the product over the calling thread's intra-op pool
// (core/parallel.h); small products run on the caller either way.
void packed_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                  int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
                  bool parallel);

// The kernel set packed_sgemm uses now (tile sizes for tests, name for logs).
const packed::KernelSet& packed_kernels();

}  // namespace gpipe::ops::cpu
