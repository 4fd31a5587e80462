// The packed fp32 GEMM (ops/cpu/gemm_packed.h) against Eigen's GEMM in double,
// at every ISA level this CPU supports (the detection itself:
// tests/core/cpu_isa_test.cc).
// Sizes sit around each level's tile edges (mr, nr) and k-slice edge (kc).
#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/cpu_isa.h"
#include "core/error.h"
#include "core/parallel.h"
#include "ops/cpu/blas.h"
#include "ops/cpu/gemm_blocking.h"
#include "ops/cpu/gemm_packed.h"

using namespace gpipe;
using Catch::Contains;

namespace {

struct GemmCase {
  bool ta = false, tb = false;
  int64_t m = 1, n = 1, k = 1;
  float alpha = 1, beta = 0;
  int64_t pad = 0;        // extra elements per stored row of A, B and C
  bool parallel = false;  // through parallel_gemm (the pool's threads) instead of gemm
  bool dispatch = false;  // through ops::cpu::gemm / parallel_gemm (packed or, if small, Eigen)
};

std::string describe(const GemmCase& g) {
  return detail::concat(cpu_isa_name(cpu_isa()), (g.ta ? " A^T" : " A"), (g.tb ? " B^T" : " B"),
                        " m=", g.m, " n=", g.n, " k=", g.k, " alpha=", g.alpha, " beta=", g.beta,
                        " pad=", g.pad, g.parallel ? " parallel" : "");
}

// Runs the case through the packed backend and checks every element against
// Eigen in double, within 1e-5 of sum |alpha a b| + |beta c| for that element;
// the padding between rows of C must stay as it was. Reports the worst element.
void check_case(const GemmCase& g, std::mt19937& rng) {
  const int64_t a_rows = g.ta ? g.k : g.m, a_cols = g.ta ? g.m : g.k;
  const int64_t b_rows = g.tb ? g.n : g.k, b_cols = g.tb ? g.k : g.n;
  const int64_t lda = a_cols + g.pad, ldb = b_cols + g.pad, ldc = g.n + g.pad;
  std::normal_distribution<float> normal;
  std::vector<float> a(a_rows * lda), b(b_rows * ldb), c(g.m * ldc);
  for (float& x : a) x = normal(rng);
  for (float& x : b) x = normal(rng);
  for (float& x : c) x = normal(rng);
  if (g.beta == 0)
    std::fill(c.begin(), c.end(), std::numeric_limits<float>::quiet_NaN());  // must not be read

  std::vector<double> a64(a.begin(), a.end()), b64(b.begin(), b.end()), abs_a(a64), abs_b(b64);
  for (double& x : abs_a) x = std::abs(x);
  for (double& x : abs_b) x = std::abs(x);
  std::vector<double> ref(g.m * ldc, 0.0), mag(g.m * ldc, 0.0);
  ops::cpu::set_gemm_backend(ops::cpu::GemmBackend::kEigen);
  ops::cpu::gemm<double>(g.ta, g.tb, g.m, g.n, g.k, 1.0, a64.data(), lda, b64.data(), ldb, 0.0,
                         ref.data(), ldc);
  ops::cpu::gemm<double>(g.ta, g.tb, g.m, g.n, g.k, 1.0, abs_a.data(), lda, abs_b.data(), ldb, 0.0,
                         mag.data(), ldc);
  ops::cpu::set_gemm_backend(ops::cpu::GemmBackend::kPacked);
  const std::vector<float> c0 = c;
  // The packed kernels themselves (ops::cpu::gemm hands small products to
  // Eigen, Note [Small products]; g.dispatch tests that route too).
  if (g.dispatch && g.parallel)
    ops::cpu::parallel_gemm<float>(g.ta, g.tb, g.m, g.n, g.k, g.alpha, a.data(), lda, b.data(), ldb,
                                   g.beta, c.data(), ldc);
  else if (g.dispatch)
    ops::cpu::gemm<float>(g.ta, g.tb, g.m, g.n, g.k, g.alpha, a.data(), lda, b.data(), ldb, g.beta,
                          c.data(), ldc);
  else
    ops::cpu::packed_sgemm(g.ta, g.tb, g.m, g.n, g.k, g.alpha, a.data(), lda, b.data(), ldb, g.beta,
                           c.data(), ldc, g.parallel);

  int64_t bad = 0, worst_i = 0, worst_j = 0;
  double worst = 0;
  for (int64_t i = 0; i < g.m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const int64_t at = i * ldc + j;
      if (j >= g.n) {  // padding between rows of C is left alone
        if (!(std::isnan(c[at]) && std::isnan(c0[at])) && c[at] != c0[at]) ++bad;
        continue;
      }
      const double keep = g.beta == 0 ? 0.0 : double(g.beta) * c0[at];
      const double want = double(g.alpha) * ref[at] + keep;
      const double tol = 1e-5 * (std::abs(double(g.alpha)) * mag[at] + std::abs(keep)) + 1e-30;
      const double err = std::abs(double(c[at]) - want) / tol;
      if (!(err <= 1.0)) ++bad;
      if (!(err <= worst)) worst = err, worst_i = i, worst_j = j;
    }
  }
  INFO(describe(g) << ": worst element (" << worst_i << ", " << worst_j << ") at " << worst
                   << " x tolerance");
  CHECK(bad == 0);
}

std::vector<int64_t> around(int64_t edge, int64_t extra) {
  return {1, edge - 1, edge, edge + 1, 2 * edge + 1, extra};
}

}  // namespace

TEST_CASE("gemm: the packed backend is the float default and names its ISA") {
  CHECK(ops::cpu::gemm_backend() == ops::cpu::GemmBackend::kPacked);
  for (CpuIsa isa : supported_cpu_isas()) {
    CpuIsaGuard guard(isa);
    CHECK(ops::cpu::gemm_backend_name() == std::string("packed-") + cpu_isa_name(isa));
    CHECK(ops::cpu::packed_kernels().name == std::string(cpu_isa_name(isa)));
  }
}

TEST_CASE("gemm: packed equals Eigen around every tile edge, all transpositions, each ISA level") {
  std::mt19937 rng(7);
  for (CpuIsa isa : supported_cpu_isas()) {
    CpuIsaGuard guard(isa);
    const auto& ks = ops::cpu::packed_kernels();
    const int64_t kc = ops::cpu::gemm_blocking(ks.mr, ks.nr, 4, ks.kc_cap).kc;
    for (int64_t m : around(ks.mr, 100))
      for (int64_t n : around(ks.nr, 257))
        for (int64_t k : {int64_t{1}, int64_t{7}, kc - 1, kc + 1, int64_t{600}})
          for (int t = 0; t < 4; ++t) {
            GemmCase g;
            g.ta = t & 1, g.tb = t & 2, g.m = m, g.n = n, g.k = k;
            g.alpha = 1.0f, g.beta = (m + n + k) % 2 ? 0.0f : 1.0f;
            check_case(g, rng);
          }
  }
}

TEST_CASE("gemm: packed alpha, beta and leading strides wider than the rows") {
  std::mt19937 rng(8);
  for (CpuIsa isa : supported_cpu_isas()) {
    CpuIsaGuard guard(isa);
    for (float alpha : {1.0f, -0.5f, 2.0f})
      for (float beta : {0.0f, 1.0f, 0.25f})
        for (int64_t pad : {0, 3, 64})
          for (int t = 0; t < 4; ++t) {
            GemmCase g;
            g.ta = t & 1, g.tb = t & 2, g.m = 33, g.n = 65, g.k = 300, g.alpha = alpha,
            g.beta = beta, g.pad = pad;
            check_case(g, rng);
          }
  }
}

TEST_CASE("gemm: packed across the row-block and column-chunk edges") {
  std::mt19937 rng(10);
  for (CpuIsa isa : supported_cpu_isas()) {
    CpuIsaGuard guard(isa);
    const auto& ks = ops::cpu::packed_kernels();
    const int64_t mc = ops::cpu::gemm_blocking(ks.mr, ks.nr, 4, ks.kc_cap).mc;
    for (int t = 0; t < 4; ++t) {
      GemmCase tall;  // more rows than one packed A block
      tall.ta = t & 1, tall.tb = t & 2, tall.m = mc + 5, tall.n = 21, tall.k = 40, tall.beta = 0.5f;
      check_case(tall, rng);
      GemmCase wide;  // more columns than one packed B chunk (8192)
      wide.ta = t & 1, wide.tb = t & 2, wide.m = 9, wide.n = 8192 + 77, wide.k = 30;
      check_case(wide, rng);
    }
  }
}

TEST_CASE("gemm: packed with k = 0 or alpha = 0 only scales C") {
  for (CpuIsa isa : supported_cpu_isas()) {
    CpuIsaGuard guard(isa);
    std::vector<float> c(3 * 5, 2.0f);
    const float a[1] = {1.0f}, b[1] = {1.0f};
    ops::cpu::gemm<float>(false, false, 3, 4, 0, 1.0f, a, 1, b, 4, 0.5f, c.data(), 5);
    CHECK(c[0] == 1.0f);
    CHECK(c[4] == 2.0f);  // padding untouched
    std::fill(c.begin(), c.end(), std::numeric_limits<float>::quiet_NaN());
    ops::cpu::gemm<float>(true, true, 3, 4, 0, 1.0f, a, 3, b, 1, 0.0f, c.data(), 5);
    CHECK(c[0] == 0.0f);
    CHECK(c[13] == 0.0f);
    std::fill(c.begin(), c.end(),
              2.0f);  // the packed entry itself, below gemm's own k = 0 shortcut
    ops::cpu::packed_sgemm(false, true, 3, 4, 0, 1.0f, a, 1, b, 1, 0.25f, c.data(), 5, true);
    CHECK(c[0] == 0.5f);
    CHECK(c[4] == 2.0f);
    std::vector<float> ones(16, 1.0f);
    std::fill(c.begin(), c.end(), 3.0f);
    ops::cpu::gemm<float>(false, false, 3, 4, 4, 0.0f, ones.data(), 4, ones.data(), 4, 1.0f,
                          c.data(), 5);
    CHECK(c[7] == 3.0f);
  }
}

TEST_CASE(
    "gemm: packed over a 2- and a 3-thread pool equals Eigen (rows split, columns split, "
    "several k-slices)") {
  std::mt19937 rng(9);
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    IntraOpScope scope(&pool);
    CAPTURE(threads);
    for (CpuIsa isa : supported_cpu_isas()) {
      CpuIsaGuard guard(isa);
      const std::vector<std::array<int64_t, 3>> shapes = {
          {301, 203, 300},  // rows of C split, edges everywhere
          {5, 2000, 600},   // one A panel: columns split
          {1000, 9, 700},   // one B panel
          {256, 256, 400},  // a short last panel: Note [Row shares]
          {257, 1031, 513}};
      for (const auto& [m, n, k] : shapes)
        for (int t = 0; t < 4; ++t) {
          GemmCase g;
          g.ta = t & 1, g.tb = t & 2, g.m = m, g.n = n, g.k = k, g.alpha = 0.75f,
          g.beta = t == 1 ? 0.5f : 0.0f;
          g.pad = t == 2 ? 5 : 0;
          g.parallel = true;
          check_case(g, rng);
        }
    }
  }
}

// The packed GEMM over a pool gives the serial product's bits, whatever the
// thread count and however its rows or columns are split: every element sums
// its k-slices in order (here with a shallower last slice, k = 513 and 700),
// so a run's results do not depend on the intra-op threads.
TEST_CASE("gemm: several k-slices over 2 and 3 threads give the serial product's bits") {
  std::mt19937 rng(13);
  std::normal_distribution<float> normal;
  for (CpuIsa isa : supported_cpu_isas()) {
    CpuIsaGuard guard(isa);
    for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3>>{
             {301, 203, 700}, {256, 256, 1024}, {257, 1031, 513}, {1000, 9, 700}, {5, 2000, 600}})
      for (int t = 0; t < 4; ++t) {
        const bool ta = t & 1, tb = t & 2;
        const float beta = t == 1 ? 0.5f : 0.0f;
        std::vector<float> a(m * k), b(k * n), c0(m * n);
        for (float& x : a) x = normal(rng);
        for (float& x : b) x = normal(rng);
        for (float& x : c0) x = normal(rng);
        const int64_t lda = ta ? m : k, ldb = tb ? k : n;
        std::vector<float> serial = c0;
        ops::cpu::packed_sgemm(ta, tb, m, n, k, 0.75f, a.data(), lda, b.data(), ldb, beta,
                               serial.data(), n, false);
        for (int threads : {2, 3}) {
          ThreadPool pool(threads);
          IntraOpScope scope(&pool);
          std::vector<float> c = c0;
          ops::cpu::packed_sgemm(ta, tb, m, n, k, 0.75f, a.data(), lda, b.data(), ldb, beta,
                                 c.data(), n, true);
          INFO(cpu_isa_name(isa) << " m=" << m << " n=" << n << " k=" << k << " ta=" << ta
                                 << " tb=" << tb << " threads=" << threads);
          CHECK(c == serial);
        }
      }
  }
}

// Note [Small products] in ops/cpu/blas.cc: ops::cpu::gemm sends small or thin products to Eigen
// and the rest to the packed kernels; both routes, serial and over 2 threads.
TEST_CASE(
    "gemm: the float dispatch (small products to Eigen, large ones packed) equals the reference") {
  ThreadPool pool(2);
  IntraOpScope scope(&pool);
  std::mt19937 rng(13);
  for (CpuIsa isa : supported_cpu_isas()) {
    CpuIsaGuard guard(isa);
    const std::vector<std::array<int64_t, 3>> shapes = {
        {8, 256, 27}, {128, 16, 1152}, {256, 4, 2304}, {300, 301, 302}, {1024, 64, 300}};
    for (const auto& [m, n, k] : shapes)
      for (int t = 0; t < 8; ++t) {
        GemmCase g;
        g.ta = t & 1, g.tb = t & 2, g.m = m, g.n = n, g.k = k, g.alpha = 1.0f,
        g.beta = t == 1 ? 0.5f : 0.0f;
        g.dispatch = true;
        g.parallel = t & 4;
        check_case(g, rng);
      }
  }
}

TEST_CASE("gemm: the compute line names the CPU, the active level and the GEMM path") {
  for (CpuIsa isa : supported_cpu_isas()) {
    CpuIsaGuard guard(isa);
    const std::string line = ops::cpu::compute_description();
    CHECK_THAT(line, Contains(std::string("kernels: ") + cpu_isa_name(isa)) &&
                         Contains(std::string(ops::cpu::gemm_backend_name())) &&
                         Contains("supports"));
  }
}

TEST_CASE("gemm blocking: cache parameters decode as cpuid lays them out") {
  // A 48 KB, 12-way L1d of 64-byte lines in 64 sets, shared by 2 threads.
  const uint32_t eax = 1u | (1u << 5) | (1u << 14), ebx = (11u << 22) | (0u << 12) | 63u, ecx = 63;
  const CacheLeaf l1 = decode_cache_leaf(eax, ebx, ecx);
  CHECK(l1.level == 1);
  CHECK(l1.bytes == 48 * 1024);
  CHECK(l1.shared_by == 2);
  // An instruction cache has no size here; a unified L2 of 2 MB (16-way, 2048 sets).
  CHECK(decode_cache_leaf(2u | (1u << 5), ebx, ecx).bytes == 0);
  CHECK(decode_cache_leaf(3u | (2u << 5), (15u << 22) | 63u, 2047).bytes == 2 * 1024 * 1024);
  // This machine's caches: detected, plausible, and named in the description.
  const CpuCaches& c = cpu_caches();
  CHECK(c.l1d >= 8 * 1024);
  CHECK(c.l1d <= 1024 * 1024);
  CHECK(c.l2 >= c.l1d);
  CHECK_THAT(cache_description(c), Contains("L1d") && Contains(c.source));
}

TEST_CASE(
    "gemm blocking: the model gives the hand-tuned Zen 4 blocking and grows with the caches") {
  using ops::cpu::GemmBlocking, ops::cpu::model_blocking;
  const CpuCaches zen4{32 * 1024, 1024 * 1024, 16 * 1024 * 1024, "test"};
  const CpuCaches xeon{48 * 1024, 2048 * 1024, 2 * 1024 * 1024, "test"};
  // The AVX-512 float32 kernel (14 x 32) was tuned by hand on Zen 4 at kc 384, nc 512.
  CHECK(model_blocking(zen4, 14, 32, 4, 512) == GemmBlocking{384, 512, 4088});
  CHECK(model_blocking(xeon, 14, 32, 4, 512) == GemmBlocking{512, 768, 504});
  // bfloat16 pairs: half the bytes per element.
  CHECK(model_blocking(zen4, 14, 32, 2, 512) == GemmBlocking{512, 768, 4088});
  // AMX's tile: both panels in L1, B in a quarter of L2 (Note [Tile kernels' blocking]).
  CHECK(model_blocking(xeon, 32, 32, 2, 512, true) == GemmBlocking{256, 1024, 2048});
  CHECK(model_blocking(xeon, 32, 32, 2, 512) == GemmBlocking{512, 1536, 1024});
  // Tiny or unknown caches still give a usable blocking.
  const GemmBlocking tiny = model_blocking(CpuCaches{}, 4, 8, 4, 256);
  CHECK((tiny.kc >= 16 && tiny.nc >= 32 && tiny.mc >= 32));
}

namespace {
struct BlockingGuard {
  explicit BlockingGuard(ops::cpu::GemmBlocking b) { ops::cpu::set_gemm_blocking(b); }
  ~BlockingGuard() { ops::cpu::set_gemm_blocking(std::nullopt); }
};
// Elements whose bits differ (a count: a failing CHECK on large vectors prints them whole).
int64_t differing(const std::vector<float>& a, const std::vector<float>& b) {
  int64_t d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return d;
}
}  // namespace

// Note [Claimed A units] in ops/cpu/gemm_split.cc: the blocking pinned so that every level has
// three B chunks, three k-slices and enough A units (grouped for A^T) for 2 and 3 threads; the
// serial bits also when the split's tasks run in turn (called from inside a pool task).
TEST_CASE("gemm: claimed A units over several B chunks and k-slices give the serial bits") {
  const BlockingGuard blocking(ops::cpu::GemmBlocking{64, 256, 4096});
  std::mt19937 rng(17);
  std::normal_distribution<float> normal;
  const int64_t m = 2240, n = 600, k = 130;  // A^T: 20, 47 and 70 units of 8 panels per level
  std::vector<float> a(m * k), b(k * n), c0(m * n);
  for (std::vector<float>* v : {&a, &b, &c0})
    for (float& x : *v) x = normal(rng);
  for (CpuIsa isa : supported_cpu_isas()) {
    CpuIsaGuard guard(isa);
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      const float beta = t == 1 ? 0.5f : 0.0f;
      const int64_t lda = ta ? m : k, ldb = tb ? k : n;
      const auto product = [&](std::vector<float>& c, bool parallel) {
        ops::cpu::packed_sgemm(ta, tb, m, n, k, 0.75f, a.data(), lda, b.data(), ldb, beta, c.data(),
                               n, parallel);
      };
      std::vector<float> serial = c0;
      product(serial, false);
      for (int threads : {2, 3}) {
        ThreadPool pool(threads);
        IntraOpScope scope(&pool);
        INFO(cpu_isa_name(isa) << " ta=" << ta << " tb=" << tb << " threads=" << threads);
        std::vector<float> c = c0, inline_c = c0;  // inline: the split's tasks run in turn
        product(c, true);
        parallel_for(0, 2, 1, [&](int64_t lo, int64_t) {
          if (lo == 0) product(inline_c, true);
        });
        CHECK(differing(c, serial) == 0);
        CHECK(differing(inline_c, serial) == 0);
      }
    }
  }
}

TEST_CASE("gemm blocking: any blocking gives the same products (small and odd slices)") {
  std::mt19937 rng(11);
  for (const ops::cpu::GemmBlocking b :
       {ops::cpu::GemmBlocking{5, 40, 20}, ops::cpu::GemmBlocking{17, 1, 1},
        ops::cpu::GemmBlocking{64, 96, 30}}) {
    BlockingGuard guard(b);
    for (CpuIsa isa : supported_cpu_isas()) {
      CpuIsaGuard isa_guard(isa);
      INFO("kc " << b.kc << " nc " << b.nc << " mc " << b.mc);
      for (int t = 0; t < 4; ++t) {
        GemmCase g;
        g.ta = t & 1, g.tb = t & 2, g.m = 45, g.n = 131, g.k = 70, g.beta = t == 2 ? 0.5f : 0.0f;
        check_case(g, rng);
        g.parallel = true;
        g.m = 150;
        check_case(g, rng);
      }
    }
  }
  CHECK_THROWS_WITH(ops::cpu::set_gemm_blocking(ops::cpu::GemmBlocking{0, 512, 4096}),
                    Contains("out of range"));
  const auto& ks = ops::cpu::packed_kernels();
  CHECK_THAT(ops::cpu::gemm_blocking_description(ks.mr, ks.nr, 4, ks.kc_cap), Contains("kc "));
}

namespace {

// Note [GEMM epilogue]'s passes as the composed ops do them, after a plain product.
void epilogue_reference(const ops::cpu::GemmEpilogue& ep, std::vector<float>& c, int64_t m,
                        int64_t n) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float& x = c[i * n + j];
      if (ep.bias) x = x + ep.bias[j];
      if (ep.relu) x = x > 0.0f ? x : 0.0f;
      if (ep.residual) x = ep.residual[i * ep.ld_residual + j] + x;
    }
}

}  // namespace

TEST_CASE("gemm: the epilogue (bias, ReLU, residual) has the bits of the product then the passes") {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  auto fill = [&](std::vector<float>& v) {
    for (float& x : v) x = normal(rng);
  };
  for (CpuIsa isa : supported_cpu_isas()) {
    CpuIsaGuard guard(isa);
    const auto& ks = ops::cpu::packed_kernels();
    const int64_t kc = ops::cpu::gemm_blocking(ks.mr, ks.nr, 4, ks.kc_cap).kc;
    for (int64_t m : {int64_t{1}, int64_t{ks.mr + 1}, int64_t{100}})
      for (int64_t n : {int64_t{3}, int64_t{ks.nr - 1}, int64_t{2 * ks.nr + 1}})
        for (int64_t k : {int64_t{7}, kc + 1})
          for (int t = 0; t < 4; ++t)
            for (int variant = 1; variant < 8; ++variant)
              for (bool parallel : {false, true}) {
                const bool ta = t & 1, tb = t & 2;
                std::vector<float> a(m * k), b(k * n), bias(n), res(m * n), c(m * n), ref(m * n);
                fill(a), fill(b), fill(bias), fill(res);
                ops::cpu::GemmEpilogue ep;
                ep.bias = variant & 1 ? bias.data() : nullptr;
                ep.relu = variant & 2;
                ep.residual = variant & 4 ? res.data() : nullptr;
                ep.ld_residual = n;
                INFO(cpu_isa_name(isa)
                     << " m=" << m << " n=" << n << " k=" << k << " ta=" << ta << " tb=" << tb
                     << " variant " << variant << (parallel ? " parallel" : ""));
                const int64_t lda = ta ? m : k, ldb = tb ? k : n;
                ops::cpu::packed_sgemm(ta, tb, m, n, k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f,
                                       ref.data(), n, parallel);
                epilogue_reference(ep, ref, m, n);
                ops::cpu::packed_sgemm(ta, tb, m, n, k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f,
                                       c.data(), n, parallel, &ep);
                CHECK(c == ref);
                // Through the dispatcher: packed, or Eigen then the epilogue for small products.
                std::fill(c.begin(), c.end(), -1.0f);
                ops::cpu::parallel_gemm<float>(ta, tb, m, n, k, 1.0f, a.data(), lda, b.data(), ldb,
                                               0.0f, ref.data(), n);
                epilogue_reference(ep, ref, m, n);
                ops::cpu::parallel_gemm_epilogue(ta, tb, m, n, k, a.data(), lda, b.data(), ldb,
                                                 c.data(), n, ep);
                CHECK(c == ref);
              }
  }
}

// Note [Short panels] in ops/cpu/gemm_kernels.h: a short last panel's rows
// come from the short kernel with the full kernel's bits, so no row of C
// depends on how many rows follow it (m = q mr + r against m = (q + 1) mr on
// the same leading rows), for every r, transposition, beta and k-slicing.
TEST_CASE("gemm: a short last panel gives the bits of the full tile's rows, each ISA level") {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  for (CpuIsa isa : supported_cpu_isas()) {
    CpuIsaGuard guard(isa);
    const auto& ks = ops::cpu::packed_kernels();
    const int64_t full = 2 * ks.mr, n = 2 * ks.nr + 3;
    for (int64_t k : {int64_t{5}, int64_t{700}})
      for (int t = 0; t < 4; ++t) {
        const bool ta = t & 1, tb = t & 2;
        const float beta = t == 3 ? 0.5f : 0.0f;
        std::vector<float> a(full * k), b(k * n), c0(full * n);
        for (float& x : a) x = normal(rng);
        for (float& x : b) x = normal(rng);
        for (float& x : c0) x = normal(rng);
        const int64_t lda = ta ? full : k, ldb = tb ? k : n;
        std::vector<float> want = c0;
        ops::cpu::packed_sgemm(ta, tb, full, n, k, 1.0f, a.data(), lda, b.data(), ldb, beta,
                               want.data(), n, false);
        for (int64_t m = ks.mr + 1; m < full; ++m) {
          std::vector<float> got = c0;
          ops::cpu::packed_sgemm(ta, tb, m, n, k, 1.0f, a.data(), lda, b.data(), ldb, beta,
                                 got.data(), n, m % 2 == 0);
          int64_t bad = 0;
          for (int64_t i = 0; i < m * n; ++i) bad += got[i] != want[i];
          INFO(cpu_isa_name(isa) << " ta=" << ta << " tb=" << tb << " m=" << m << " k=" << k);
          CHECK(bad == 0);
          for (int64_t i = m * n; i < full * n; ++i) bad += got[i] != c0[i];
          CHECK(bad == 0);  // rows past m untouched
        }
      }
  }
}
