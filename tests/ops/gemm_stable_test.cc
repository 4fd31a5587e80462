// ops::cpu::stable_gemm (ops/cpu/blas.h): the packed GEMM whatever the
// product's size, so a kernel that deals a product's rows to its own tasks
// (Note [Vocabulary blocks] in ops/cpu/loss.cc) gets the same bits however
// the rows are split and whatever the thread count, small products too
// (which parallel_gemm hands to Eigen).
#include <array>
#include <catch2/catch.hpp>
#include <random>
#include <vector>

#include "core/cpu_isa.h"
#include "core/parallel.h"
#include "ops/cpu/blas.h"

namespace gpipe {
namespace {

TEST_CASE("stable_gemm: rows split into separate products, and any thread count, keep the bits") {
  std::mt19937 rng(21);
  std::normal_distribution<float> normal;
  for (CpuIsa isa : supported_cpu_isas()) {
    CpuIsaGuard guard(isa);
    // Small ones (under parallel_gemm's 16 MFLOP) and a large one; a k of two slices.
    for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3>>{
             {150, 512, 48}, {43, 76, 64}, {300, 64, 512}, {256, 300, 700}})
      for (int t = 0; t < 4; ++t) {
        const bool ta = t & 1, tb = t & 2;
        const float beta = tb ? 0.5f : 0.0f;  // (several k-slices add with beta 1 too)
        std::vector<float> a(m * k), b(k * n), c0(m * n);
        for (float& x : a) x = normal(rng);
        for (float& x : b) x = normal(rng);
        for (float& x : c0) x = normal(rng);
        const int64_t lda = ta ? m : k, ldb = tb ? k : n;
        // Row r of op(A) starts at a + r * lda, or at a + r for A^T.
        const auto row = [&](int64_t r) { return a.data() + (ta ? r : r * k); };
        std::vector<float> whole = c0;
        ops::cpu::stable_gemm(ta, tb, m, n, k, a.data(), lda, b.data(), ldb, beta, whole.data(), n,
                              false);
        INFO(cpu_isa_name(isa) << " m=" << m << " n=" << n << " k=" << k << " ta=" << ta
                               << " tb=" << tb);
        // Three row ranges at uneven boundaries, each its own product.
        std::vector<float> split = c0;
        const int64_t cut[] = {0, m / 3 + 1, 2 * m / 3 + 2, m};
        for (int s = 0; s < 3; ++s)
          ops::cpu::stable_gemm(ta, tb, cut[s + 1] - cut[s], n, k, row(cut[s]), lda, b.data(), ldb,
                                beta, split.data() + cut[s] * n, n, false);
        CHECK(split == whole);
        for (int threads : {2, 3}) {
          ThreadPool pool(threads);
          IntraOpScope scope(&pool);
          std::vector<float> c = c0;
          ops::cpu::stable_gemm(ta, tb, m, n, k, a.data(), lda, b.data(), ldb, beta, c.data(), n,
                                true);
          INFO(threads << " threads");
          CHECK(c == whole);
        }
      }
  }
}

}  // namespace
}  // namespace gpipe
