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
      double worst = 0;
      int64_t differing = 0;
      for (int64_t i = 0; i < m * n; ++i) {
        differing += float_bits(hw[i]) != float_bits(emu[i]);
        worst = std::max(worst, std::abs(static_cast<double>(hw[i]) - emu[i]) /
                                    (std::abs(static_cast<double>(emu[i])) + 1.0));
      }
      INFO("m=" << m << " n=" << n << " k=" << k << " ta=" << ta << " tb=" << tb << ": "
                << differing << " elements differ in their bits, worst " << worst);
      CHECK(worst <= 1e-5);
    }
}
