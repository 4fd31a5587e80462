// The bfloat16 GEMM's choice of path (ops/cpu/gemm_packed.h): AMX tiles and
// AVX512_BF16 dot products are refused, saying why, where they cannot run,
// and chosen per level and switch; and, on a CPU whose AMX tiles Linux
// grants, the hardware kernel against its emulation (the emulated path's
// products are checked in bf16_ops_test.cc on any AVX512_BF16 CPU).
#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/cpu_isa.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/parallel.h"
#include "ops/cpu/gemm_amx_emulated.h"
#include "ops/cpu/gemm_packed.h"

using namespace gpipe;
using Catch::Contains;
using ops::cpu::Bf16Path;

namespace {

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

}  // namespace

TEST_CASE(
    "bfloat16 GEMM: the AMX and dot paths are refused where they cannot run, and chosen per "
    "level") {
  uint16_t one = 0x3f80;
  float c = 0;
  const auto run = [&](Bf16Path path) {
    ops::cpu::packed_gemm_bf16(false, false, 1, 1, 1, 1.0f, &one, 1, &one, 1, 0.0f, &c, 1, false,
                               path);
  };
  if (!detected_amx()) {
    INFO("AMX: " << amx_status());
    CHECK_THROWS_WITH(run(Bf16Path::kAmx),
                      Contains("the AMX path needs AMX-BF16 tiles") && Contains(amx_status()));
    CHECK_THROWS_WITH(set_cpu_amx(true), Contains("set_cpu_amx") && Contains(amx_status()));
    CHECK(!cpu_amx());
  }
  if (!detected_bf16_dot()) {
    CHECK_THROWS_WITH(run(Bf16Path::kDot), Contains("needs AVX512_BF16"));
    CHECK(ops::cpu::bf16_path() == Bf16Path::kConvert);
    return;
  }
  CpuIsaGuard avx512(CpuIsa::kAvx512);
  const bool amx = detected_amx();
  CHECK(ops::cpu::bf16_path() == (amx ? Bf16Path::kAmx : Bf16Path::kDot));
  CHECK(ops::cpu::bf16_gemm_name() == (amx ? "amx-bf16" : "avx512-bf16"));
  {
    CpuAmxGuard off(false);  // GPIPE_CPU_AMX=off
    CHECK(ops::cpu::bf16_path() == Bf16Path::kDot);
  }
  CpuIsaGuard guard(CpuIsa::kAvx2);
  CHECK(ops::cpu::bf16_path() == Bf16Path::kConvert);
  CHECK(ops::cpu::bf16_gemm_name() == "bf16-convert-avx2");
}

// Note [AMX rounding]. The hardware's TDPBF16PS does not round as the
// SDM's pseudocode (and so the emulation) does: on a Sapphire Rapids class
// Xeon about 13% of one instruction's sums differ in the last bit from any
// simple model (each pair rounded in turn, the 32 products summed exactly
// then rounded, a tree of float32 sums, a fixed-point sum truncated below
// the largest product), so the bits of the hardware are not the
// emulation's. Both are float32 sums of the same exact bfloat16 products,
// so each is held, against the sum in float64, to the probabilistic bound
// for a k-term sum (Higham and Mary): |c - c64| <= 2 sqrt(k) u sum |a b|,
// u = 2^-24, plus C's own rounding (the worst-case bound, k u sum |a b|, is
// 3-16 times looser here). Both use under an eighth of it on these
// products; a product with a wrong pair or tile is off by about sum |a b| itself.
TEST_CASE("bfloat16 GEMM: AMX tiles on the hardware against their emulation") {
  if (!detected_amx()) {
    WARN("AMX tiles are not usable here (" << amx_status()
                                           << "): the hardware AMX kernel did not run");
    return;
  }
  std::mt19937 rng(14);
  std::normal_distribution<float> normal;
  const std::vector<std::array<int64_t, 3>> sizes = {
      {32, 32, 32}, {64, 96, 512}, {45, 77, 1000}, {130, 70, 300}};
  for (const auto& s : sizes)
    for (int t = 0; t < 4; ++t) {
      const bool ta = (t & 1) != 0, tb = (t & 2) != 0;
      const int64_t m = s[0], n = s[1], k = s[2];
      std::vector<uint16_t> a(m * k), b(k * n);
      for (uint16_t& x : a) x = float_to_bf16_bits(normal(rng));
      for (uint16_t& x : b) x = float_to_bf16_bits(normal(rng));
      std::vector<float> hw(m * n), emu(m * n);
      ops::cpu::packed_gemm_bf16(ta, tb, m, n, k, 1.0f, a.data(), ta ? m : k, b.data(), tb ? k : n,
                                 0.0f, hw.data(), n, t >= 2, Bf16Path::kAmx);
      ops::cpu::set_amx_kernels_for_testing(&ops::cpu::packed::amx_emulated_kernels());
      ops::cpu::packed_gemm_bf16(ta, tb, m, n, k, 1.0f, a.data(), ta ? m : k, b.data(), tb ? k : n,
                                 0.0f, emu.data(), n, t >= 2, Bf16Path::kAmx);
      ops::cpu::set_amx_kernels_for_testing(nullptr);
      // A is m x k (stored k x m when ta), B is k x n (n x k when tb).
      const auto at = [&](int64_t i, int64_t p) {
        return static_cast<double>(bf16_bits_to_float(a[ta ? p * m + i : i * k + p]));
      };
      const auto bt = [&](int64_t p, int64_t j) {
        return static_cast<double>(bf16_bits_to_float(b[tb ? j * k + p : p * n + j]));
      };
      const double u = std::ldexp(1.0, -24);
      double worst_hw = 0, worst_emu = 0;  // error over the bound, worst element
      int64_t differing = 0;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double exact = 0, magnitude = 0;
          for (int64_t p = 0; p < k; ++p) {
            exact += at(i, p) * bt(p, j);
            magnitude += std::abs(at(i, p) * bt(p, j));
          }
          const double bound = (2 * std::sqrt(static_cast<double>(k)) + 1) * u * magnitude;
          worst_hw = std::max(worst_hw, std::abs(hw[i * n + j] - exact) / bound);
          worst_emu = std::max(worst_emu, std::abs(emu[i * n + j] - exact) / bound);
          differing += float_bits(hw[i * n + j]) != float_bits(emu[i * n + j]);
        }
      INFO("m=" << m << " n=" << n << " k=" << k << " ta=" << ta << " tb=" << tb << ": "
                << differing << " elements differ in their bits; worst error over the bound: "
                << "hardware " << worst_hw << ", emulation " << worst_emu);
      CHECK(worst_hw <= 1.0);
      CHECK(worst_emu <= 1.0);
    }
}

namespace {

// The AMX path through its emulation for one scope, at the avx512 level;
// false (with a warning) where the CPU lacks AVX512_BF16, which its packers need.
bool amx_emulation_runs() {
  if (detected_bf16_dot()) return true;
  WARN("no AVX512_BF16 on this CPU: the AMX emulation did not run");
  return false;
}
struct EmulatedAmx {
  CpuIsaGuard avx512{CpuIsa::kAvx512};
  EmulatedAmx() {
    ops::cpu::set_amx_kernels_for_testing(&ops::cpu::packed::amx_emulated_kernels());
  }
  ~EmulatedAmx() { ops::cpu::set_amx_kernels_for_testing(nullptr); }
  EmulatedAmx(const EmulatedAmx&) = delete;
  EmulatedAmx& operator=(const EmulatedAmx&) = delete;
};

std::vector<uint16_t> random_bf16(int64_t count, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::vector<uint16_t> v(static_cast<size_t>(count));
  for (uint16_t& x : v) x = float_to_bf16_bits(normal(rng));
  return v;
}

bool same_bits(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && std::equal(x.begin(), x.end(), y.begin(), [](float p, float q) {
           return float_bits(p) == float_bits(q);
         });
}

}  // namespace

// Note [Tile kernels' blocking] in ops/cpu/gemm_blocking.cc: the AMX
// kernel's depth per slice follows from the product's shape (a C of at most
// 64K floats takes the deeper slices), never from the thread count, so a
// product has the same bits at 1, 2 and 3 threads, C small and large, over
// several slices, with a short last panel (whose rows add C after their
// sums, so there the depth moves bits). Through the emulation, on any
// AVX512_BF16 CPU.
TEST_CASE("bfloat16 GEMM: the AMX path's bits do not depend on the thread count") {
  if (!amx_emulation_runs()) return;
  const EmulatedAmx amx;
  std::mt19937 rng(17);
  for (const std::array<int64_t, 3>& s : {std::array<int64_t, 3>{60, 90, 1100},  // 5K floats of C
                                          std::array<int64_t, 3>{300, 260, 700}}) {
    const int64_t m = s[0], n = s[1], k = s[2];
    const std::vector<uint16_t> a = random_bf16(m * k, rng), b = random_bf16(k * n, rng);
    std::vector<float> want;
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      IntraOpScope scope(&pool);
      std::vector<float> c(m * n);
      ops::cpu::packed_gemm_bf16(true, false, m, n, k, 1.0f, a.data(), m, b.data(), n, 0.0f,
                                 c.data(), n, true, Bf16Path::kAmx);
      if (threads == 1) want = c;
      INFO("m=" << m << " n=" << n << " k=" << k << ", " << threads << " threads");
      CHECK(same_bits(c, want));
    }
  }
}

// The fused loss deals a chunk's rows to tasks, each its own product on its
// own thread (Note [Vocabulary blocks] in ops/cpu/loss.cc), and needs the
// bits of one product over all the rows: so a product on its caller alone
// takes the same depth whatever its rows (the small-C depth is for products
// over the pool). Rows 128 = 64 + 64 around the 64K-float C boundary, a
// short column tile (n 600), several slices; AMX through its emulation.
TEST_CASE("bfloat16 GEMM: on the AMX path a product's rows split in two give its bits") {
  if (!amx_emulation_runs()) return;
  const EmulatedAmx amx;
  std::mt19937 rng(19);
  const int64_t m = 128, n = 600, k = 1100;
  const std::vector<uint16_t> a = random_bf16(m * k, rng), b = random_bf16(k * n, rng);
  std::vector<float> whole(m * n), halves(m * n);
  ops::cpu::packed_gemm_bf16(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f,
                             whole.data(), n, false, Bf16Path::kAmx);
  for (int64_t r0 : {int64_t{0}, m / 2})
    ops::cpu::packed_gemm_bf16(false, false, m / 2, n, k, 1.0f, a.data() + r0 * k, k, b.data(), n,
                               0.0f, halves.data() + r0 * n, n, false, Bf16Path::kAmx);
  CHECK(same_bits(whole, halves));
}
