// Note [Two k-slices on two threads] in ops/cpu/gemm_split.cc: a product of
// exactly two k-slices on two threads runs the slices side by side and adds
// them, and must give the serial product's bits, with every transposition,
// beta, epilogue and ISA level, C stored as it is or transposed (300 x 70
// at the AVX-512 level, Note [Transposed small products] in
// gemm_packed.cc); products it must not take (alpha other
// than 1, three slices, three threads) keep the serial bits too.
#include <array>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/cpu_isa.h"
#include "core/parallel.h"
#include "ops/cpu/gemm_blocking.h"
#include "ops/cpu/gemm_kernels.h"
#include "ops/cpu/gemm_packed.h"

using namespace gpipe;

namespace {

struct Product {
  bool ta, tb;
  int64_t m, n, k;
  float alpha, beta;
};

// C for one product, serial or on the pool in scope; C starts as c0.
std::vector<float> run(const Product& p, const std::vector<float>& a, const std::vector<float>& b,
                       const std::vector<float>& c0, bool parallel,
                       const ops::cpu::GemmEpilogue* ep) {
  std::vector<float> c = c0;
  ops::cpu::packed_sgemm(p.ta, p.tb, p.m, p.n, p.k, p.alpha, a.data(), p.ta ? p.m : p.k, b.data(),
                         p.tb ? p.k : p.n, p.beta, c.data(), p.n, parallel, ep);
  return c;
}

// Bit for bit (== would let -0 pass for +0).
bool same_bits(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("gemm: two k-slices side by side on two threads give the serial product's bits") {
  std::mt19937 rng(21);
  std::normal_distribution<float> normal;
  const auto filled = [&](int64_t count) {
    std::vector<float> v(count);
    for (float& x : v) x = normal(rng);
    return v;
  };
  // kc pinned, so k decides the slices on any CPU; every product here is
  // over the driver's 4 MFLOP, below which it runs on the caller.
  constexpr int kc = 96;
  for (CpuIsa isa : supported_cpu_isas()) {
    CpuIsaGuard guard(isa);
    ops::cpu::set_gemm_blocking(ops::cpu::GemmBlocking{kc, 256, 4096});
    ThreadPool pool(2);
    IntraOpScope scope(&pool);
    for (const auto& [m, n] :
         std::vector<std::array<int64_t, 2>>{{256, 256}, {45, 1001}, {300, 70}, {300, 64}})
      for (int t = 0; t < 4; ++t)
        for (int variant = 0; variant < 6; ++variant) {
          // 0-2: beta 0 (C must not be read), 1, 0.5; 3: bias + ReLU; 4: residual + dropout;
          // 5: alpha 0.75, which the split must leave alone.
          const bool ta = t & 1, tb = t & 2;
          const int64_t k = variant == 2 ? kc + 31 : 2 * kc;  // even slices, or not
          const float beta = variant == 1 ? 1.0f : variant == 2 ? 0.5f : 0.0f;
          const Product p{ta, tb, m, n, k, variant == 5 ? 0.75f : 1.0f, beta};
          const std::vector<float> a = filled(m * k), b = filled(k * n), bias = filled(n),
                                   res = filled(m * n);
          std::vector<float> c0 = filled(m * n);
          if (beta == 0.0f) c0.assign(m * n, std::numeric_limits<float>::quiet_NaN());
          ops::cpu::GemmEpilogue ep;
          if (variant == 3) ep.bias = bias.data(), ep.relu = true;
          if (variant == 4) {
            ep.residual = res.data(), ep.ld_residual = n;
            ep.dropout = true, ep.dropout_key = 99, ep.dropout_threshold = 0.25f;
            ep.dropout_scale = 1.0f / 0.75f, ep.ld_dropout = n;
          }
          const ops::cpu::GemmEpilogue* use = variant == 3 || variant == 4 ? &ep : nullptr;
          const std::vector<float> serial = run(p, a, b, c0, false, use);
          const int64_t before = ops::cpu::split_k_products();
          const std::vector<float> split = run(p, a, b, c0, true, use);
          const bool taken = ops::cpu::split_k_products() > before;
          INFO(cpu_isa_name(isa) << " m=" << m << " n=" << n << " k=" << k << " ta=" << ta
                                 << " tb=" << tb << " variant " << variant);
          CHECK(taken == (variant != 5));  // the path under test did run
          CHECK(same_bits(split, serial));
        }
    ops::cpu::set_gemm_blocking(std::nullopt);
  }
}

TEST_CASE(
    "gemm: three k-slices, three threads, or a C over 256 KB do not split k and keep the serial "
    "bits") {
  std::mt19937 rng(22);
  std::normal_distribution<float> normal;
  ops::cpu::set_gemm_blocking(ops::cpu::GemmBlocking{64, 256, 4096});
  for (const auto& [m, n, k, threads] : std::vector<std::array<int64_t, 4>>{
           {200, 150, 3 * 64, 2}, {200, 150, 2 * 64, 3}, {257, 256, 2 * 64, 2}}) {
    std::vector<float> a(m * k), b(k * n), c0(m * n, 0.0f);
    for (float& x : a) x = normal(rng);
    for (float& x : b) x = normal(rng);
    const Product p{false, false, m, n, k, 1.0f, 0.0f};
    const std::vector<float> serial = run(p, a, b, c0, false, nullptr);
    ThreadPool pool(static_cast<int>(threads));
    IntraOpScope scope(&pool);
    const int64_t before = ops::cpu::split_k_products();
    INFO("m=" << m << " n=" << n << " k=" << k << " threads=" << threads);
    CHECK(same_bits(run(p, a, b, c0, true, nullptr), serial));
    CHECK(ops::cpu::split_k_products() == before);
  }
  ops::cpu::set_gemm_blocking(std::nullopt);
}
