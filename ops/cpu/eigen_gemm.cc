// Eigen's GEMM, compiled once per ISA level like the kernel files (Note [CPU
// ISA kernels]): the small-product path of ops/cpu/blas.cc (Note [Small
// products]) and the GPIPE_GEMM=eigen backend.
#include "ops/cpu/isa/prelude.h"  // this file is built per ISA level: Note [CPU ISA kernels]

namespace gpipe::ops::cpu::GPIPE_ISA_NS {
namespace {

template <class T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Stride = Eigen::OuterStride<>;

template <class T>
void eigen_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
                const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  using ConstMap = Eigen::Map<const RowMat<T>, 0, Stride>;
  using Map = Eigen::Map<RowMat<T>, 0, Stride>;
  Map C(c, m, n, Stride(ldc));
  ConstMap A(a, ta ? k : m, ta ? m : k, Stride(lda));
  ConstMap B(b, tb ? n : k, tb ? k : n, Stride(ldb));
  if (beta == T(0))
    C.setZero();
  else if (beta != T(1))
    C *= beta;
  if (!ta && !tb)
    C.noalias() += alpha * A * B;
  else if (ta && !tb)
    C.noalias() += alpha * A.transpose() * B;
  else if (!ta && tb)
    C.noalias() += alpha * A * B.transpose();
  else
    C.noalias() += alpha * A.transpose() * B.transpose();
}

}  // namespace

extern const EigenGemmFn<float> eigen_gemm_f32_isa;
constinit const EigenGemmFn<float> eigen_gemm_f32_isa = &eigen_gemm<float>;
extern const EigenGemmFn<double> eigen_gemm_f64_isa;
constinit const EigenGemmFn<double> eigen_gemm_f64_isa = &eigen_gemm<double>;

}  // namespace gpipe::ops::cpu::GPIPE_ISA_NS
