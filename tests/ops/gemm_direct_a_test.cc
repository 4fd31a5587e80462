// Note [Direct A] in ops/cpu/gemm_kernels.h: at a level with the direct
// kernels, a float32 product with op(A) = A reads A's rows in the
// micro-kernel instead of packing them, and must give the packed panels'
// bits: every tile edge (short last panels included), k-slices, beta 0 with
// a NaN C and beta != 0, alpha exact and inexact, a row stride wider than
// k, B both ways, the epilogues in registers and as a pass, C stored
// transposed (Note [Transposed small products] in gemm_packed.cc), one to
// three threads over the pool's paths (rows claimed by units, several B
// chunks, two k-slices side by side). A
// is allocated to its last row's k-th element exactly, so a kernel reading
// past the rows or depths it was given reads outside the buffer (caught
// under AddressSanitizer), and C's padding must stay as it was.
#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_isa.h"
#include "core/parallel.h"
#include "ops/cpu/blas.h"
#include "ops/cpu/gemm_blocking.h"
#include "ops/cpu/gemm_kernels.h"
#include "ops/cpu/gemm_packed.h"

using namespace gpipe;

namespace {

// set_direct_a for one scope.
class DirectAGuard {
 public:
  explicit DirectAGuard(bool on) : was_(ops::cpu::direct_a_enabled()) {
    ops::cpu::set_direct_a(on);
  }
  ~DirectAGuard() { ops::cpu::set_direct_a(was_); }
  DirectAGuard(const DirectAGuard&) = delete;
  DirectAGuard& operator=(const DirectAGuard&) = delete;

 private:
  bool was_;
};

struct Case {
  bool tb;
  int64_t m, n, k;
  float alpha, beta;
  int64_t pad;  // extra elements per row of A and C
};

// C (with `pad` extra elements a row) after the product, direct or packed.
std::vector<float> product(const Case& g, const std::vector<float>& a, const std::vector<float>& b,
                           const std::vector<float>& c0, bool direct, bool parallel,
                           const ops::cpu::GemmEpilogue* ep = nullptr) {
  DirectAGuard guard(direct);
  std::vector<float> c = c0;
  ops::cpu::packed_sgemm(false, g.tb, g.m, g.n, g.k, g.alpha, a.data(), g.k + g.pad, b.data(),
                         g.tb ? g.k : g.n, g.beta, c.data(), g.n + g.pad, parallel, ep);
  return c;
}

// Whether two C's hold the same bits (NaN where both are NaN: the padding).
bool same_bits(const std::vector<float>& x, const std::vector<float>& y) {
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i)
    if (!(x[i] == y[i] || (x[i] != x[i] && y[i] != y[i]))) return false;
  return true;
}

struct Operands {
  std::vector<float> a, b, c0;
};

Operands operands(const Case& g, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  Operands o;
  // A ends at its last row's k-th element: nothing past it is there to read.
  o.a.resize(static_cast<size_t>((g.m - 1) * (g.k + g.pad) + g.k));
  o.b.resize(static_cast<size_t>(g.k * g.n));
  o.c0.resize(static_cast<size_t>(g.m * (g.n + g.pad)));
  for (float& x : o.a) x = normal(rng);
  for (float& x : o.b) x = normal(rng);
  for (float& x : o.c0) x = g.beta == 0 ? std::numeric_limits<float>::quiet_NaN() : normal(rng);
  return o;
}

}  // namespace

TEST_CASE(
    "gemm direct A: the packed panels' bits at every tile edge, slice, stride and thread "
    "count, each level that has it") {
  std::mt19937 rng(21);
  int levels = 0;
  for (CpuIsa isa : supported_cpu_isas()) {
    CpuIsaGuard isa_guard(isa);
    const auto& ks = ops::cpu::packed_kernels();
    if (ks.kernel_direct == nullptr) continue;
    ++levels;
    const int64_t mr = ks.mr, nr = ks.nr;
    const int64_t kc = ops::cpu::gemm_blocking(ks.mr, ks.nr, 4, ks.kc_cap).kc;
    for (int64_t m : {int64_t{1}, mr - 1, mr, mr + 1, 3 * mr + 5, int64_t{100}})
      for (int64_t n : {int64_t{1}, nr - 1, 2 * nr + 3})
        for (int64_t k : {int64_t{1}, int64_t{7}, kc + 1})
          for (int variant = 0; variant < 6; ++variant) {
            // B as stored and transposed; alpha 1, a power of two and 0.3
            // (alpha acc inexact: the short panel's two roundings show);
            // beta 0 (C NaN) and 0.7; rows of A and C padded or not.
            constexpr float kAlpha[6] = {1.0f, 1.0f, -0.5f, 1.0f, 0.3f, 0.3f};
            constexpr float kBeta[6] = {0.0f, 0.0f, 0.0f, 0.7f, 0.7f, 0.0f};
            constexpr int64_t kPad[6] = {0, 5, 0, 5, 3, 0};
            const Case g{variant % 2 == 1, m, n, k, kAlpha[variant], kBeta[variant], kPad[variant]};
            const Operands o = operands(g, rng);
            INFO(cpu_isa_name(isa)
                 << " m=" << m << " n=" << n << " k=" << k << " tb=" << g.tb << " alpha=" << g.alpha
                 << " beta=" << g.beta << " pad=" << g.pad);
            const std::vector<float> want = product(g, o.a, o.b, o.c0, false, false);
            int64_t pad_changed = 0;  // C's padding as it was (NaN stays NaN)
            for (int64_t i = 0; i < m; ++i)
              for (int64_t j = n; j < n + g.pad; ++j) {
                const float x = want[i * (n + g.pad) + j], x0 = o.c0[i * (n + g.pad) + j];
                pad_changed += !(x == x0 || (x != x && x0 != x0));
              }
            CHECK(pad_changed == 0);
            const int64_t before = ops::cpu::direct_a_products();
            CHECK(same_bits(product(g, o.a, o.b, o.c0, true, false), want));
            // The direct path ran: on A, or on B^T where the product ran
            // transposed (Note [Transposed small products]: then op(A) is B^T).
            const auto padded = [&](int64_t r, int64_t c) {
              return static_cast<double>((r + mr - 1) / mr * mr) *
                     static_cast<double>((c + nr - 1) / nr * nr);
            };
            const bool swapped = padded(n, m) < 0.8 * padded(m, n);
            CHECK(ops::cpu::direct_a_products() == before + (!swapped || g.tb ? 1 : 0));
            for (int threads : {2, 3}) {
              ThreadPool pool(threads);
              IntraOpScope scope(&pool);
              INFO(threads << " threads");
              CHECK(same_bits(product(g, o.a, o.b, o.c0, true, true), want));
            }
          }
  }
  // The AVX2 and AVX-512 levels have the direct kernels.
  const auto isas = supported_cpu_isas();
  if (std::find(isas.begin(), isas.end(), CpuIsa::kAvx2) != isas.end()) CHECK(levels > 0);
}

TEST_CASE(
    "gemm direct A: epilogues in registers and as a pass, and larger products, keep the "
    "packed bits") {
  std::mt19937 rng(22);
  std::normal_distribution<float> normal;
  for (CpuIsa isa : supported_cpu_isas()) {
    CpuIsaGuard isa_guard(isa);
    const auto& ks = ops::cpu::packed_kernels();
    if (ks.kernel_direct == nullptr) continue;
    const auto blocking = ops::cpu::gemm_blocking(ks.mr, ks.nr, 4, ks.kc_cap);
    // Small; the pool's paths (rows claimed by units, split by rows); several
    // B chunks (n over nc); two k-slices of a small C (Note [Two k-slices on
    // two threads]).
    for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3>>{{ks.mr + 3, ks.nr + 5, 33},
                                                                     {301, 203, 700},
                                                                     {1024, 64, 256},
                                                                     {200, blocking.nc + 37, 40},
                                                                     {120, 100, blocking.kc + 1}})
      for (int variant : {1, 3, 6, 7, 8, 15}) {
        const Case g{variant % 2 == 0, m, n, k, 1.0f, 0.0f, 0};
        const Operands o = operands(g, rng);
        std::vector<float> bias(static_cast<size_t>(n)), res(static_cast<size_t>(m * n));
        for (float& x : bias) x = normal(rng);
        for (float& x : res) x = normal(rng);
        ops::cpu::GemmEpilogue ep;
        ep.bias = variant & 1 ? bias.data() : nullptr;
        ep.relu = (variant & 2) != 0;
        ep.residual = variant & 4 ? res.data() : nullptr;
        ep.ld_residual = n;
        ep.dropout = (variant & 8) != 0;  // the pass instead of the kernel in registers
        ep.dropout_key = 99;
        ep.dropout_threshold = 0.25f;
        ep.dropout_scale = 1.0f / 0.75f;
        ep.ld_dropout = n;
        INFO(cpu_isa_name(isa) << " m=" << m << " n=" << n << " k=" << k << " epilogue variant "
                               << variant);
        const std::vector<float> want = product(g, o.a, o.b, o.c0, false, false, &ep);
        CHECK(same_bits(product(g, o.a, o.b, o.c0, true, false, &ep), want));
        for (int threads : {2, 3}) {
          ThreadPool pool(threads);
          IntraOpScope scope(&pool);
          INFO(threads << " threads");
          const int64_t split_before = ops::cpu::split_k_products();
          CHECK(same_bits(product(g, o.a, o.b, o.c0, true, true, &ep), want));
          if (threads == 2 && k == blocking.kc + 1)  // the two slices side by side ran
            CHECK(ops::cpu::split_k_products() == split_before + 1);
        }
      }
  }
}

TEST_CASE("gemm direct A: the compute line says whether A is read in place") {
  for (CpuIsa isa : supported_cpu_isas()) {
    CpuIsaGuard isa_guard(isa);
    const bool has = ops::cpu::packed_kernels().kernel_direct != nullptr;
    INFO(cpu_isa_name(isa));
    {
      DirectAGuard on(true);
      CHECK((ops::cpu::compute_description().find("A read in place") != std::string::npos) == has);
    }
    DirectAGuard off(false);
    const std::string line = ops::cpu::compute_description();
    CHECK(line.find("A read in place") == std::string::npos);
    CHECK((line.find("GPIPE_GEMM_DIRECT_A=0") != std::string::npos) == has);
  }
}

TEST_CASE("gemm direct A: not for A^T or with it turned off") {
  std::mt19937 rng(23);
  std::normal_distribution<float> normal;
  std::vector<float> a(64 * 64), b(64 * 64), c(64 * 64);
  for (float& x : a) x = normal(rng);
  for (float& x : b) x = normal(rng);
  const int64_t before = ops::cpu::direct_a_products();
  ops::cpu::packed_sgemm(true, false, 64, 64, 64, 1.0f, a.data(), 64, b.data(), 64, 0.0f, c.data(),
                         64, false);
  {
    DirectAGuard off(false);
    ops::cpu::packed_sgemm(false, false, 64, 64, 64, 1.0f, a.data(), 64, b.data(), 64, 0.0f,
                           c.data(), 64, false);
  }
  CHECK(ops::cpu::direct_a_products() == before);
}

// Note [Prefetched A sources] in ops/cpu/gemm_pack.cc: the prefetch of the
// next A panels' source is a hint, on or off by CPU maker; either way a
// product has the same bits, A^T (packed a group of panels at a time) and A
// (read in place or packed) alike, over several groups, at one thread in two
// k-slices and at two in one (two slices would run side by side, Note [Two
// k-slices on two threads], past the rows' prefetch), every level.
TEST_CASE("gemm A prefetch: on or off, the same bits; the compute line says which") {
  const bool was = ops::cpu::prefetch_a_enabled();
  std::mt19937 rng(31);
  std::normal_distribution<float> normal;
  for (CpuIsa isa : supported_cpu_isas()) {
    CpuIsaGuard isa_guard(isa);
    const auto& ks = ops::cpu::packed_kernels();
    // Past three groups of eight A panels, a short last one.
    const int64_t m = 25 * ks.mr + 3, n = 3 * ks.nr + 5,
                  kc = ops::cpu::gemm_blocking(ks.mr, ks.nr, 4, ks.kc_cap).kc;
    for (bool ta : {false, true})
      for (int threads : {1, 2}) {
        const int64_t k = threads == 1 ? kc + 40 : kc - 8;
        std::vector<float> a(m * k), b(k * n);
        for (float& x : a) x = normal(rng);
        for (float& x : b) x = normal(rng);
        ThreadPool pool(threads);
        IntraOpScope scope(&pool);
        std::vector<float> c[2];
        for (bool on : {false, true}) {
          ops::cpu::set_prefetch_a(on);
          c[on].assign(m * n, 0.0f);
          ops::cpu::packed_sgemm(ta, false, m, n, k, 1.0f, a.data(), ta ? m : k, b.data(), n, 0.0f,
                                 c[on].data(), n, true);
          CHECK((ops::cpu::compute_description().find(
                     on ? "next A prefetched" : "next A not prefetched") != std::string::npos));
        }
        INFO(cpu_isa_name(isa) << (ta ? " A^T" : " A") << ", " << threads << " threads");
        CHECK(same_bits(c[0], c[1]));
      }
  }
  ops::cpu::set_prefetch_a(was);
}

TEST_CASE("gemm A prefetch: off by default on Intel CPUs only") {
  if (std::getenv("GPIPE_GEMM_PREFETCH_A") != nullptr) {
    WARN("GPIPE_GEMM_PREFETCH_A is set: the default was not checked");
    return;
  }
  CHECK(ops::cpu::prefetch_a_enabled() == (cpu_vendor() != CpuVendor::kIntel));
}
