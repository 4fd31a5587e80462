// bfloat16 / float16: the conversions (core/dtype.h) and ops::cast at every
// ISA level with its gradient. Products on 16-bit operands are
// bf16_ops_test.cc's, 16-bit inputs bf16_inputs_test.cc's.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/autograd.h"
#include "core/cpu_isa.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/precision.h"
#include "core/tensor.h"
#include "ops/cpu/blas.h"
#include "ops/cpu/gemm_packed.h"
#include "ops/ops.h"

using namespace gpipe;
using Catch::Contains;

namespace {

float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

std::vector<CpuIsa> supported_levels() {
  std::vector<CpuIsa> levels;
  for (int i = 0; i <= static_cast<int>(detected_cpu_isa()); ++i)
    levels.push_back(static_cast<CpuIsa>(i));
  return levels;
}

// Round to nearest even by exact arithmetic in double: the reference for both formats.
double round_to(double x, int mantissa_bits, int min_exp, double max_finite) {
  if (std::isnan(x) || std::isinf(x) || x == 0) return x;
  int e;
  std::frexp(x, &e);  // x = f * 2^e, 0.5 <= |f| < 1
  e = std::max(e - 1, min_exp);
  const double ulp = std::ldexp(1.0, e - mantissa_bits);
  const double r = std::nearbyint(x / ulp) * ulp;  // default rounding: to nearest even
  if (std::abs(r) > max_finite) return std::copysign(INFINITY, x);
  return r;
}

}  // namespace

TEST_CASE("bfloat16 conversion rounds to nearest even and keeps NaN and infinities") {
  CHECK(float_to_bf16_bits(1.0f) == 0x3f80);
  CHECK(float_to_bf16_bits(-2.0f) == 0xc000);
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even one (1).
  CHECK(float_to_bf16_bits(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);
  CHECK(float_to_bf16_bits(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);
  CHECK(float_to_bf16_bits(INFINITY) == 0x7f80);
  CHECK(float_to_bf16_bits(-INFINITY) == 0xff80);
  CHECK(std::isnan(bf16_bits_to_float(float_to_bf16_bits(std::nanf("")))));
  // A NaN whose payload lies only in the low half stays a NaN (not infinity).
  CHECK(std::isnan(bf16_bits_to_float(float_to_bf16_bits(bits_float(0x7f800001u)))));
  CHECK(float_to_bf16_bits(std::numeric_limits<float>::max()) == 0x7f80);  // rounds up past max

  std::mt19937 rng(5);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 200000; ++i) {
    const float f = bits_float(any(rng));
    if (std::isnan(f)) continue;
    const double want = round_to(f, 7, -126, 3.3895313892515355e38);
    const float got = bf16_bits_to_float(float_to_bf16_bits(f));
    if (want != static_cast<double>(got))
      FAIL("bfloat16 of " << f << ": " << got << " vs " << want);
  }
  for (uint32_t b = 0; b < 65536; ++b) {  // every bfloat16 survives the round trip
    const float f = bf16_bits_to_float(static_cast<uint16_t>(b));
    if (!std::isnan(f)) REQUIRE(float_to_bf16_bits(f) == b);
  }
}

TEST_CASE("float16 conversion rounds to nearest even, with subnormals and overflow") {
  CHECK(float_to_f16_bits(1.0f) == 0x3c00);
  CHECK(float_to_f16_bits(65504.0f) == 0x7bff);
  CHECK(float_to_f16_bits(65519.0f) == 0x7bff);
  CHECK(float_to_f16_bits(65520.0f) == 0x7c00);  // halfway to 65536: rounds to infinity
  CHECK(float_to_f16_bits(std::ldexp(1.0f, -24)) == 0x0001);
  CHECK(float_to_f16_bits(std::ldexp(1.0f, -25)) == 0x0000);      // tie: to even (zero)
  CHECK(float_to_f16_bits(3 * std::ldexp(1.0f, -25)) == 0x0002);  // tie: to even (2)
  CHECK(float_to_f16_bits(-0.0f) == 0x8000);
  CHECK(std::isnan(f16_bits_to_float(float_to_f16_bits(std::nanf("")))));
  std::mt19937 rng(6);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 200000; ++i) {
    const float f = bits_float(any(rng) & 0xbfffffffu);  // exponents up to 2^1: float16's range
    const double want = round_to(f, 10, -14, 65504.0);
    const float got = f16_bits_to_float(float_to_f16_bits(f));
    if (want != static_cast<double>(got)) FAIL("float16 of " << f << ": " << got << " vs " << want);
  }
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_bits_to_float(static_cast<uint16_t>(h));
    if (!std::isnan(f)) REQUIRE(float_to_f16_bits(f) == h);
  }
}

TEST_CASE("cast converts at every ISA level exactly as the scalar conversions do") {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> v(70000);  // past the kernel's parallel grain
  for (float& x : v) x = normal(rng);
  v[0] = INFINITY;
  v[1] = std::nanf("");
  v[2] = 1e6f;   // float16 overflow
  v[3] = 1e-7f;  // float16 subnormal
  const Tensor x = Tensor::from_vector(v, {static_cast<int64_t>(v.size())});
  for (CpuIsa isa : supported_levels()) {
    CpuIsaGuard guard(isa);
    INFO(cpu_isa_name(isa));
    const Tensor b = ops::cast(x, DType::kBFloat16), h = ops::cast(x, DType::kFloat16);
    REQUIRE(b.dtype() == DType::kBFloat16);
    REQUIRE(h.dtype() == DType::kFloat16);
    const std::vector<float> bb = ops::cast(b, DType::kFloat32).to_vector<float>();
    const std::vector<float> hh = ops::cast(h, DType::kFloat32).to_vector<float>();
    const bfloat16* bp = b.data<bfloat16>();
    for (size_t i = 0; i < v.size(); ++i) {
      REQUIRE(bp[i].bits == float_to_bf16_bits(v[i]));
      REQUIRE(float_bits(bb[i]) == float_bits(bf16_bits_to_float(float_to_bf16_bits(v[i]))));
      REQUIRE(float_bits(hh[i]) == float_bits(f16_bits_to_float(float_to_f16_bits(v[i]))));
    }
    // float64 goes through float32; Tensor::to agrees with cast.
    const Tensor d = ops::cast(ops::cast(x, DType::kFloat64), DType::kBFloat16);
    CHECK(std::memcmp(d.data<bfloat16>(), bp, v.size() * 2) == 0);
    CHECK(std::memcmp(x.to(DType::kBFloat16).data<bfloat16>(), bp, v.size() * 2) == 0);
  }
  CHECK(ops::cast(x, DType::kFloat32).impl_ptr() == x.impl_ptr());  // same dtype: no copy
  CHECK_THROWS_WITH(ops::cast(Tensor::from_vector<int64_t>({1, 2}, {2}), DType::kBFloat16),
                    Contains("cast: converts between float32, float64, bfloat16 and float16"));
}

TEST_CASE("cast's gradient is the upstream gradient in the input's dtype") {
  Tensor x = Tensor::from_vector<float>({1.0f, -2.5f, 3.0f + 1.0f / 256}, {3});
  x.set_requires_grad(true);
  Tensor b = ops::cast(x, DType::kBFloat16);
  CHECK(b.requires_grad());
  Tensor y = ops::sum(ops::mul(ops::cast(b, DType::kFloat32),
                               Tensor::from_vector<float>({1.0f / 3, 2.0f, -1.0f}, {3})));
  y.backward();
  const std::vector<float> g = x.grad().to_vector<float>();
  // 1/3 went through a bfloat16 gradient: rounded to bfloat16.
  CHECK(g[0] == bf16_bits_to_float(float_to_bf16_bits(1.0f / 3)));
  CHECK(g[1] == 2.0f);
  CHECK(g[2] == -1.0f);
  CHECK(x.grad().dtype() == DType::kFloat32);
}
