// GEMM backends. The packed backend blocks and threads by itself
// (gemm_packed.cc). OpenBLAS is told to use one thread once, at load time;
// for it and Eigen, parallel_gemm cuts C into row (or column) panels, one per
// pool thread, which keeps each panel's product large enough for their
// micro-kernels.
#include "ops/cpu/blas.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "core/cpu_isa.h"
#include "core/error.h"
#include "core/parallel.h"
#include "ops/cpu/gemm_packed.h"
#include "ops/cpu/isa/abi.h"

extern "C" void openblas_set_num_threads(int);

namespace gpipe::ops::cpu {

namespace isa_avx512 {
extern const EigenGemmFn<float> eigen_gemm_f32_isa;
extern const EigenGemmFn<double> eigen_gemm_f64_isa;
}  // namespace isa_avx512
namespace isa_avx2 {
extern const EigenGemmFn<float> eigen_gemm_f32_isa;
extern const EigenGemmFn<double> eigen_gemm_f64_isa;
}  // namespace isa_avx2
namespace isa_baseline {
extern const EigenGemmFn<float> eigen_gemm_f32_isa;
extern const EigenGemmFn<double> eigen_gemm_f64_isa;
}  // namespace isa_baseline

namespace {

// GPIPE_GEMM=packed|openblas|eigen picks the float backend for the process
// (for comparisons; packed is the default). It is read on first use, not at
// load time, so a bad value is a gpipe::Error the caller can report.
GemmBackend parse_backend_env() {
  const char* env = std::getenv("GPIPE_GEMM");
  if (env == nullptr || *env == 0) return GemmBackend::kPacked;
  const std::string_view v(env);
  if (v == "packed") return GemmBackend::kPacked;
  if (v == "openblas") return GemmBackend::kBlas;
  if (v == "eigen") return GemmBackend::kEigen;
  throw Error(detail::concat("GPIPE_GEMM='", v, "': expected packed, openblas or eigen"));
}

constexpr int kUnset = -1;
std::atomic<int> g_backend{kUnset};

GemmBackend current_backend() {
  int b = g_backend.load(std::memory_order_acquire);
  if (b == kUnset) {
    const int parsed = static_cast<int>(parse_backend_env());  // throws for a bad value, every time
    g_backend.compare_exchange_strong(b, parsed);
    b = g_backend.load(std::memory_order_acquire);
  }
  return static_cast<GemmBackend>(b);
}

[[maybe_unused]] const bool g_blas_single_threaded = [] {
  openblas_set_num_threads(1);
  return true;
}();

// Eigen's GEMM for the active ISA level (ops/cpu/eigen_gemm.cc).
template <class T>
void eigen_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
                const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  EigenGemmFn<T> f;
  if constexpr (std::is_same_v<T, float>) {
    f = cpu_isa() == CpuIsa::kAvx512 ? isa_avx512::eigen_gemm_f32_isa
        : cpu_isa() == CpuIsa::kAvx2 ? isa_avx2::eigen_gemm_f32_isa
                                     : isa_baseline::eigen_gemm_f32_isa;
  } else {
    f = cpu_isa() == CpuIsa::kAvx512 ? isa_avx512::eigen_gemm_f64_isa
        : cpu_isa() == CpuIsa::kAvx2 ? isa_avx2::eigen_gemm_f64_isa
                                     : isa_baseline::eigen_gemm_f64_isa;
  }
  f(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void blas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

void blas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
               int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

// The packed backend is float only; double keeps to OpenBLAS.
template <class T>
GemmBackend backend_for() {
  const GemmBackend b = current_backend();
  return b == GemmBackend::kPacked && !std::is_same_v<T, float> ? GemmBackend::kBlas : b;
}

// Note [Small products]. Packing costs O(mk + kn) per call and pads every
// mr x nr tile; for the many small products of a convolution (8-128 output
// channels, a few hundred columns, k = 9C) that overhead loses to Eigen's
// kernels, compiled per ISA level like the CPU kernels (on an AMD EPYC Zen 4,
// docs/BENCHMARKS.md: packed 37 vs Eigen 70 GF/s at 8 x 256 x 27). So the
// packed backend hands products below kSmallFlops, or with a side below 32,
// to Eigen. Eigen's bits depend on where a product's rows are cut
// (tests/ops/gemm_stable_test.cc fails under GPIPE_GEMM=eigen), so such a
// product from 2 MFLOP up, which parallel_gemm splits over the pool, differs
// in its last bits between intra-op thread counts; the packed GEMM's do not
// (stable_gemm takes it whatever the size). On a 2-core Intel Xeon (Sapphire
// Rapids class) the packed GEMM was also faster at 2-13 MFLOP (1.02-1.24x at
// one thread); not changed here: the threshold was measured on AMD, and
// convolutions lean on it.
constexpr double kSmallFlops = 1 << 24;
constexpr int64_t kSmallSide = 32;

bool small_product(int64_t m, int64_t n, int64_t k) {
  return 2.0 * m * n * k < kSmallFlops || std::min({m, n, k}) < kSmallSide;
}

}  // namespace

void set_gemm_backend(GemmBackend backend) { g_backend = static_cast<int>(backend); }
GemmBackend gemm_backend() { return current_backend(); }
std::string_view gemm_backend_name() {
  switch (current_backend()) {
    case GemmBackend::kBlas:
      return "openblas";
    case GemmBackend::kEigen:
      return "eigen";
    case GemmBackend::kPacked:
      break;
  }
  switch (cpu_isa()) {
    case CpuIsa::kAvx512:
      return "packed-avx512";
    case CpuIsa::kAvx2:
      return "packed-avx2";
    case CpuIsa::kBaseline:
      break;
  }
  return "packed-baseline";
}

std::string compute_description() {
  std::string gemm(gemm_backend_name());
  if (current_backend() == GemmBackend::kPacked) {
    if (packed_kernels().kernel_direct != nullptr)  // Note [Direct A] in gemm_kernels.h
      gemm += direct_a_enabled() ? ", A read in place" : ", A packed (GPIPE_GEMM_DIRECT_A=0)";
    gemm += prefetch_a_enabled() ? ", next A prefetched" : ", next A not prefetched";
    gemm += detail::concat(", products under ", kSmallFlops / (1 << 20),
                           " MFLOP or with a side under ", kSmallSide, ": eigen");
  }
  return cpu_description() + " | kernels: " + cpu_isa_name(cpu_isa()) + " | float GEMM: " + gemm +
         " | bfloat16 GEMM: " + bf16_gemm_name();
}

template <class T>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
          const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
    return;
  }
  switch (backend_for<T>()) {
    case GemmBackend::kPacked:
      if constexpr (std::is_same_v<T, float>) {
        if (small_product(m, n, k))
          eigen_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        else
          packed_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, false);
      }
      break;
    case GemmBackend::kBlas:
      blas_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
      break;
    case GemmBackend::kEigen:
      eigen_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
      break;
  }
}

template <class T>
void parallel_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                   int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if constexpr (std::is_same_v<T, float>) {
    if (backend_for<T>() == GemmBackend::kPacked && !small_product(m, n, k)) {
      packed_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, true);
      return;
    }
  }
  const int threads = intra_op_threads();
  const double flops = 2.0 * m * n * k;
  if (threads <= 1 || flops < 2e6) {
    gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  if (m >= n || m >= 64 * threads) {
    // Row panels of C: rows [lo, hi) of op(A).
    parallel_for(0, m, std::max<int64_t>(16, m / threads), [&](int64_t lo, int64_t hi) {
      const T* ap = ta ? a + lo : a + lo * lda;
      gemm(ta, tb, hi - lo, n, k, alpha, ap, lda, b, ldb, beta, c + lo * ldc, ldc);
    });
  } else {
    // Column panels of C: columns [lo, hi) of op(B).
    parallel_for(0, n, std::max<int64_t>(16, n / threads), [&](int64_t lo, int64_t hi) {
      const T* bp = tb ? b + lo * ldb : b + lo;
      gemm(ta, tb, m, hi - lo, k, alpha, a, lda, bp, ldb, beta, c + lo, ldc);
    });
  }
}

void stable_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float beta, float* c, int64_t ldc, bool parallel) {
  if (backend_for<float>() == GemmBackend::kPacked)
    packed_sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc, parallel);
  else if (parallel)
    parallel_gemm<float>(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
  else
    gemm<float>(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

void parallel_gemm_epilogue(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a,
                            int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                            const GemmEpilogue& epilogue) {
  if (backend_for<float>() == GemmBackend::kPacked && !small_product(m, n, k)) {
    packed_sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc, true, &epilogue);
    return;
  }
  parallel_gemm<float>(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
  if (epilogue.active()) packed_kernels().epilogue(epilogue, c, ldc, 0, 0, m, n);
}

void gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
               int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc,
               bool parallel) {
  packed_gemm_bf16(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, parallel);
}

void gemm_bf16_out(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const uint16_t* a,
                   int64_t lda, const uint16_t* b, int64_t ldb, const GemmEpilogue& epilogue,
                   bool parallel) {
  packed_gemm_bf16_out(ta, tb, m, n, k, a, lda, b, ldb, epilogue, parallel);
}

std::string bf16_gemm_description() { return bf16_gemm_name(); }

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                          const float*, int64_t, float, float*, int64_t);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                           const double*, int64_t, double, double*, int64_t);
template void parallel_gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*,
                                   int64_t, const float*, int64_t, float, float*, int64_t);
template void parallel_gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*,
                                    int64_t, const double*, int64_t, double, double*, int64_t);

}  // namespace gpipe::ops::cpu
