// batched_gemm on CUDA through cuBLAS.
//
// cuBLAS is column-major; a row-major C = op(A) op(B) is the column-major
// C^T = op(B)^T op(A)^T, so the operands are passed swapped (B first, A
// second) with their own transpose flags and leading dimensions as stored.
// float32 goes through cublasGemmStridedBatchedEx with CUBLAS_COMPUTE_32F,
// or CUBLAS_COMPUTE_32F_FAST_TF32 when gpipe::cuda::set_allow_tf32(true);
// float64 through cublasDgemmStridedBatched; bfloat16 operands (into a
// float32 C) through cublasGemmStridedBatchedEx with CUDA_R_16BF inputs and
// CUBLAS_COMPUTE_32F. A shared B has stride 0.
#include <climits>
#include <optional>
#include <type_traits>

#include "ops/linalg_kernels.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/device.h"

namespace gpipe::ops::cuda {
namespace {

int as_int(int64_t v, const char* what, const GemmShape& s) {
  GPIPE_CHECK(v <= INT_MAX, "matmul on CUDA: ", what, " = ", v,
              " exceeds cuBLAS's 32-bit limit (batch ", s.batch, ", m ", s.m, ", n ", s.n, ", k ",
              s.k, ")");
  return static_cast<int>(v);
}

// One call's sizes in cuBLAS's column-major terms: C^T[n, m] = op(B)^T[n, k] * op(A)^T[k, m].
struct CublasGemm {
  int m, n, k, batch, lda, ldb;
  int64_t stride_a, stride_b, stride_c;
  cublasOperation_t op_a, op_b;
};

// The sizes of `s` for cuBLAS, or nullopt when nothing is left to compute:
// C is empty, or k == 0 and C has been zeroed on the device's stream.
std::optional<CublasGemm> cublas_gemm(const GemmShape& s, Tensor& c) {
  if (s.batch == 0 || s.m == 0 || s.n == 0) return std::nullopt;
  if (s.k == 0) {  // an empty sum: C = 0
    GPIPE_CUDA_CHECK(cudaMemsetAsync(c.raw_data(), 0, c.nbytes(),
                                     gpipe::cuda::compute_stream(c.device().index)));
    return std::nullopt;
  }
  return CublasGemm{as_int(s.m, "m", s),
                    as_int(s.n, "n", s),
                    as_int(s.k, "k", s),
                    as_int(s.batch, "batch", s),
                    as_int(s.ta ? s.m : s.k, "lda", s),
                    as_int(s.tb ? s.k : s.n, "ldb", s),
                    s.m * s.k,
                    s.b_shared ? 0 : s.k * s.n,
                    s.m * s.n,
                    s.ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                    s.tb ? CUBLAS_OP_T : CUBLAS_OP_N};
}

void batched_gemm_cuda(const GemmShape& s, const Tensor& a, const Tensor& b, Tensor& c) {
  const int index = c.device().index;
  gpipe::cuda::DeviceGuard guard(index);
  const std::optional<CublasGemm> g = cublas_gemm(s, c);
  if (!g) return;
  const int m = g->m, n = g->n, k = g->k, batch = g->batch, lda = g->lda, ldb = g->ldb;
  const int64_t stride_a = g->stride_a, stride_b = g->stride_b, stride_c = g->stride_c;
  const cublasOperation_t op_a = g->op_a, op_b = g->op_b;
  auto handle = gpipe::cuda::cublas_handle(index);
  if (a.dtype() == DType::kBFloat16) {  // bfloat16 operands, float32 C and sums
    const float one = 1, zero = 0;
    GPIPE_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        handle.get(), op_b, op_a, n, m, k, &one, b.data<bfloat16>(), CUDA_R_16BF, ldb, stride_b,
        a.data<bfloat16>(), CUDA_R_16BF, lda, stride_a, &zero, c.data<float>(), CUDA_R_32F, n,
        stride_c, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return;
  }
  dispatch_floating(a.dtype(), "matmul", [&](auto z) {
    using T = decltype(z);
    const T one = 1, zero = 0;
    if constexpr (std::is_same_v<T, double>) {
      GPIPE_CUBLAS_CHECK(cublasDgemmStridedBatched(
          handle.get(), op_b, op_a, n, m, k, &one, b.data<double>(), ldb, stride_b,
          a.data<double>(), lda, stride_a, &zero, c.data<double>(), n, stride_c, batch));
    } else {
      const cublasComputeType_t compute =
          gpipe::cuda::allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
      GPIPE_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
          handle.get(), op_b, op_a, n, m, k, &one, b.data<float>(), CUDA_R_32F, ldb, stride_b,
          a.data<float>(), CUDA_R_32F, lda, stride_a, &zero, c.data<float>(), CUDA_R_32F, n,
          stride_c, batch, compute, CUBLAS_GEMM_DEFAULT));
    }
  });
}

// bfloat16 a, b and C, float32 sums: cuBLAS rounds each result once.
void batched_gemm_bf16_out_cuda(const GemmShape& s, const Tensor& a, const Tensor& b, Tensor& c) {
  GPIPE_ASSERT(a.dtype() == DType::kBFloat16 && b.dtype() == DType::kBFloat16 &&
               c.dtype() == DType::kBFloat16);
  const int index = c.device().index;
  gpipe::cuda::DeviceGuard guard(index);
  const std::optional<CublasGemm> g = cublas_gemm(s, c);
  if (!g) return;
  auto handle = gpipe::cuda::cublas_handle(index);
  const float one = 1, zero = 0;
  GPIPE_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      handle.get(), g->op_b, g->op_a, g->n, g->m, g->k, &one, b.data<bfloat16>(), CUDA_R_16BF,
      g->ldb, g->stride_b, a.data<bfloat16>(), CUDA_R_16BF, g->lda, g->stride_a, &zero,
      c.data<bfloat16>(), CUDA_R_16BF, g->n, g->stride_c, g->batch, CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT));
}

}  // namespace

GPIPE_REGISTER_KERNEL(batched_gemm_bf16_out, DeviceType::kCUDA, batched_gemm_bf16_out_cuda);
GPIPE_KERNEL_ACCEPTS_16BIT(batched_gemm_bf16_out, DeviceType::kCUDA, kBFloat16);
GPIPE_REGISTER_KERNEL(batched_gemm, DeviceType::kCUDA, batched_gemm_cuda);
GPIPE_KERNEL_ACCEPTS_16BIT(batched_gemm, DeviceType::kCUDA, kBFloat16);

}  // namespace gpipe::ops::cuda
