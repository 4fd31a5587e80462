// bfloat16 / float16: the conversions (core/dtype.h), ops::cast at every ISA
// level, the bfloat16 GEMM's two paths (AVX512_BF16 dot products where the
// CPU has them, float32 after conversion everywhere) against float32 products
// of the same values, and matmul on bfloat16 operands with its gradients.
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

namespace {

struct Bf16Case {
  bool ta, tb;
  int64_t m, n, k, pad;
  float beta;
  bool parallel;
};

// C = op(A) op(B) (+ beta C) on bfloat16 operands through `path`, against
// the float32 packed GEMM of the same (widened) values: the convert path must
// equal it bit for bit, the dot path within float32 round-off of the sums.
void check_bf16(const Bf16Case& g, ops::cpu::Bf16Path path, std::mt19937& rng) {
  const int64_t a_rows = g.ta ? g.k : g.m, a_cols = g.ta ? g.m : g.k;
  const int64_t b_rows = g.tb ? g.n : g.k, b_cols = g.tb ? g.k : g.n;
  const int64_t lda = a_cols + g.pad, ldb = b_cols + g.pad, ldc = g.n + g.pad;
  std::normal_distribution<float> normal;
  std::vector<uint16_t> a(a_rows * lda), b(b_rows * ldb);
  std::vector<float> af(a.size()), bf(b.size()), c0(g.m * ldc);
  for (size_t i = 0; i < a.size(); ++i)
    af[i] = bf16_bits_to_float(a[i] = float_to_bf16_bits(normal(rng)));
  for (size_t i = 0; i < b.size(); ++i)
    bf[i] = bf16_bits_to_float(b[i] = float_to_bf16_bits(normal(rng)));
  for (float& x : c0) x = normal(rng);
  std::vector<float> c = c0, ref = c0;
  ops::cpu::packed_gemm_bf16(g.ta, g.tb, g.m, g.n, g.k, 1.0f, a.data(), lda, b.data(), ldb, g.beta,
                             c.data(), ldc, g.parallel, path);
  ops::cpu::packed_sgemm(g.ta, g.tb, g.m, g.n, g.k, 1.0f, af.data(), lda, bf.data(), ldb, g.beta,
                         ref.data(), ldc, g.parallel);
  double worst = 0;
  for (int64_t i = 0; i < g.m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const float got = c[i * ldc + j], want = ref[i * ldc + j];
      if (j >= g.n) {  // the padding of C is never written
        REQUIRE(float_bits(got) == float_bits(c0[i * ldc + j]));
        continue;
      }
      if (path == ops::cpu::Bf16Path::kConvert) {
        if (float_bits(got) != float_bits(want))
          FAIL("convert path differs from float32 at (" << i << ", " << j << "): " << got << " vs "
                                                        << want);
        continue;
      }
      double mag = std::abs(g.beta * c0[i * ldc + j]);
      for (int64_t p = 0; p < g.k; ++p) {
        const float x = g.ta ? af[p * lda + i] : af[i * lda + p];
        const float y = g.tb ? bf[j * ldb + p] : bf[p * ldb + j];
        mag += std::abs(static_cast<double>(x) * y);
      }
      worst = std::max(worst, std::abs(static_cast<double>(got) - want) / (mag + 1e-30));
    }
  }
  INFO("worst relative error " << worst);
  CHECK(worst <= 2e-6);
}

}  // namespace

TEST_CASE("bfloat16 GEMM: both paths against float32 products of the same values") {
  std::mt19937 rng(11);
  std::vector<ops::cpu::Bf16Path> paths = {ops::cpu::Bf16Path::kConvert};
  if (detected_bf16_dot()) paths.push_back(ops::cpu::Bf16Path::kDot);
  // Around the tiles (14 x 32, 6 x 16, 4 x 8), the k-slices (256, 512), odd k
  // (the dot kernel's pairs), odd row strides.
  const std::vector<std::array<int64_t, 3>> sizes = {
      {1, 1, 1},    {3, 5, 7},      {14, 32, 2},    {15, 33, 3},   {29, 65, 511},
      {64, 64, 64}, {100, 37, 513}, {7, 200, 1025}, {130, 70, 300}};
  for (CpuIsa isa : supported_levels()) {
    CpuIsaGuard guard(isa);
    for (auto path : paths) {
      for (const auto& s : sizes)
        for (int t = 0; t < 4; ++t)
          for (int64_t pad : {0, 3}) {
            const Bf16Case g{(t & 1) != 0,
                             (t & 2) != 0,
                             s[0],
                             s[1],
                             s[2],
                             pad,
                             pad ? 0.5f : 0.0f,
                             s[0] * s[1] * s[2] > 100000};
            INFO(cpu_isa_name(isa) << (path == ops::cpu::Bf16Path::kDot ? " dot" : " convert")
                                   << " ta=" << g.ta << " tb=" << g.tb << " m=" << g.m
                                   << " n=" << g.n << " k=" << g.k << " pad=" << pad);
            check_bf16(g, path, rng);
          }
    }
  }
}

TEST_CASE(
    "bfloat16 GEMM: the dot path is refused on a CPU without AVX512_BF16, and chosen per level") {
  if (!detected_bf16_dot()) {
    uint16_t one = 0x3f80;
    float c = 0;
    CHECK_THROWS_WITH(ops::cpu::packed_gemm_bf16(false, false, 1, 1, 1, 1.0f, &one, 1, &one, 1,
                                                 0.0f, &c, 1, false, ops::cpu::Bf16Path::kDot),
                      Contains("needs AVX512_BF16"));
    CHECK(ops::cpu::bf16_path() == ops::cpu::Bf16Path::kConvert);
    return;
  }
  CHECK(ops::cpu::bf16_path() ==
        (cpu_isa() == CpuIsa::kAvx512 ? ops::cpu::Bf16Path::kDot : ops::cpu::Bf16Path::kConvert));
  CpuIsaGuard guard(CpuIsa::kAvx2);
  CHECK(ops::cpu::bf16_path() == ops::cpu::Bf16Path::kConvert);
  CHECK(ops::cpu::bf16_gemm_name() == "bf16-convert-avx2");
}

TEST_CASE("matmul on bfloat16 operands: float32 product, bfloat16 gradients") {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  auto rand = [&](std::vector<int64_t> shape) {
    std::vector<float> v(Shape(shape).numel());
    for (float& x : v) x = normal(rng);
    return Tensor::from_vector(v, Shape(shape));
  };
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    const Tensor a32 = rand(ta ? std::vector<int64_t>{2, 40, 30} : std::vector<int64_t>{2, 30, 40});
    const Tensor b32 = rand(tb ? std::vector<int64_t>{20, 40} : std::vector<int64_t>{40, 20});
    Tensor a = ops::cast(a32, DType::kBFloat16).detach(),
           b = ops::cast(b32, DType::kBFloat16).detach();
    a.set_requires_grad(true);
    b.set_requires_grad(true);
    const Tensor y = ops::matmul(a, b, ta, tb);
    REQUIRE(y.dtype() == DType::kFloat32);
    // The float32 reference on the same values.
    Tensor af = ops::cast(a.detach(), DType::kFloat32), bf = ops::cast(b.detach(), DType::kFloat32);
    af.set_requires_grad(true);
    bf.set_requires_grad(true);
    const Tensor yf = ops::matmul(af, bf, ta, tb);
    const std::vector<float> yv = y.to_vector<float>(), yfv = yf.to_vector<float>();
    for (size_t i = 0; i < yv.size(); ++i) REQUIRE(yv[i] == Approx(yfv[i]).margin(1e-4));
    const Tensor w = rand({2, 30, 20});
    ops::sum(ops::mul(y, w)).backward();
    // The float32 reference with the upstream gradient rounded to bfloat16, as
    // the bfloat16 backward rounds it.
    const Tensor w16 = ops::cast(ops::cast(w, DType::kBFloat16), DType::kFloat32);
    ops::sum(ops::mul(yf, w16)).backward();
    REQUIRE(a.grad().dtype() == DType::kBFloat16);
    REQUIRE(b.grad().dtype() == DType::kBFloat16);
    const std::vector<float> ga = ops::cast(a.grad(), DType::kFloat32).to_vector<float>();
    const std::vector<float> gb = ops::cast(b.grad(), DType::kFloat32).to_vector<float>();
    const std::vector<float> gaf = af.grad().to_vector<float>(), gbf = bf.grad().to_vector<float>();
    for (size_t i = 0; i < ga.size(); ++i)
      REQUIRE(ga[i] == Approx(gaf[i]).epsilon(1e-2).margin(1e-2));
    for (size_t i = 0; i < gb.size(); ++i)
      REQUIRE(gb[i] == Approx(gbf[i]).epsilon(1e-2).margin(1e-2));
  }
  // A bfloat16 operand next to a float32 one is widened: a float32 product.
  const Tensor f = Tensor::from_vector<float>({1.5f, -2.0f, 0.25f, 3.0f}, {2, 2});
  const Tensor mixed = ops::matmul(ops::cast(f, DType::kBFloat16), f);
  CHECK(mixed.dtype() == DType::kFloat32);
  CHECK(mixed.to_vector<float>() == ops::matmul(f, f).to_vector<float>());
}

TEST_CASE("linear under bfloat16 precision multiplies bfloat16 operands") {
  std::mt19937 rng(4);
  std::normal_distribution<float> normal;
  std::vector<float> xv(8 * 16), wv(12 * 16);
  for (float& v : xv) v = normal(rng);
  for (float& v : wv) v = normal(rng);
  Tensor x = Tensor::from_vector(xv, {8, 16}), w = Tensor::from_vector(wv, {12, 16});
  w.set_requires_grad(true);
  Tensor y16;
  {
    PrecisionScope scope(Precision::kBFloat16);
    y16 = ops::linear(x, w);
  }
  const Tensor ref = ops::matmul(ops::cast(x, DType::kBFloat16),
                                 ops::cast(w.detach(), DType::kBFloat16), false, true);
  CHECK(y16.dtype() == DType::kFloat32);
  CHECK(y16.to_vector<float>() == ref.to_vector<float>());
  const Tensor y32 = ops::linear(x, w);  // float32 outside the scope
  CHECK(y32.to_vector<float>() != y16.to_vector<float>());
  ops::sum(y16).backward();
  CHECK(w.grad().dtype() == DType::kFloat32);  // master weights keep float32 gradients
}

TEST_CASE("linear at 16-bit precision: gradients equal the 16-bit products written out") {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal;
  std::vector<float> xv(2 * 5 * 16), wv(12 * 16), gv(2 * 5 * 12);
  for (float& v : xv) v = normal(rng);
  for (float& v : wv) v = normal(rng);
  for (float& v : gv) v = normal(rng);
  const Tensor g = Tensor::from_vector(gv, {2, 5, 12});
  for (Precision p : {Precision::kBFloat16, Precision::kFloat16}) {
    INFO(precision_name(p));
    const DType h = storage_dtype(p);
    Tensor x = Tensor::from_vector(xv, {2, 5, 16}), w = Tensor::from_vector(wv, {12, 16});
    x.set_requires_grad(true);
    w.set_requires_grad(true);
    {
      PrecisionScope scope(p);
      ops::sum(ops::mul(ops::linear(x, w), g)).backward();
    }
    // Written out in float32 on the rounded values: gx = round(round(g) W_r), gW = round(g)^T x_r.
    auto r = [&](const Tensor& t) { return ops::cast(ops::cast(t, h), DType::kFloat32); };
    const Tensor gr = r(g), xr = r(x.detach()), wr = r(w.detach());
    const Tensor gx = r(ops::matmul(gr, wr));
    const Tensor gw = ops::matmul(ops::reshape(gr, {-1, 12}), ops::reshape(xr, {-1, 16}), true);
    const auto a = x.grad().to_vector<float>(), b = gx.to_vector<float>();
    for (size_t i = 0; i < a.size(); ++i) REQUIRE(a[i] == Approx(b[i]).epsilon(1e-2).margin(1e-2));
    const auto c = w.grad().to_vector<float>(), d = gw.to_vector<float>();
    for (size_t i = 0; i < c.size(); ++i) REQUIRE(c[i] == Approx(d[i]).epsilon(1e-5).margin(1e-4));
  }
}

TEST_CASE("conv2d under bfloat16 precision: bfloat16 products, written out in float32") {
  // One-group convolutions multiply bfloat16 operands (ops/conv.cc, Note
  // [16-bit convolution]): y = conv(x_r, W_r) + b, gx = round(conv^T(round(g), W_r)),
  // gW = conv_w(round(g), x_r) in float32, gb = sum(g). Small planes and a
  // 24x24 one, at every ISA level (the dot path at avx512 where the CPU has
  // AVX512_BF16, the convert path below).
  struct Config {
    Shape x, w;
    ops::Conv2dOptions opt;
  };
  const std::vector<Config> configs = {
      {Shape{6, 5, 8, 8}, Shape{7, 5, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}},
      {Shape{6, 9, 4, 4}, Shape{8, 9, 1, 1}, {}},
      {Shape{3, 4, 9, 8}, Shape{6, 4, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 1}},
      {Shape{2, 3, 24, 24}, Shape{4, 3, 1, 7}, {{1, 1}, {0, 3}, {1, 1}, 1}},
  };
  std::mt19937 rng(21);
  std::normal_distribution<float> normal;
  auto rand = [&](const Shape& s) {
    std::vector<float> v(s.numel());
    for (float& e : v) e = normal(rng);
    return Tensor::from_vector(v, s);
  };
  auto r = [](const Tensor& t) {
    return ops::cast(ops::cast(t, DType::kBFloat16), DType::kFloat32).detach();
  };
  for (CpuIsa isa : supported_levels()) {
    CpuIsaGuard guard(isa);
    for (const Config& c : configs) {
      INFO(cpu_isa_name(isa) << " x " << c.x << ", w " << c.w);
      Tensor x = rand(c.x).set_requires_grad(true), w = rand(c.w).set_requires_grad(true);
      Tensor b = rand(Shape{c.w[0]}).set_requires_grad(true);
      Tensor y;
      {
        PrecisionScope scope(Precision::kBFloat16);
        y = ops::conv2d(x, w, b, c.opt);
      }
      REQUIRE(y.dtype() == DType::kFloat32);
      const Tensor g = rand(y.shape());
      ops::sum(ops::mul(y, g)).backward();
      REQUIRE(x.grad().dtype() == DType::kFloat32);
      REQUIRE(w.grad().dtype() == DType::kFloat32);

      Tensor xr = r(x.detach()).set_requires_grad(true), wr = r(w.detach()).set_requires_grad(true);
      const Tensor yr = ops::conv2d(xr, wr, b.detach(), c.opt);
      ops::sum(ops::mul(yr, r(g))).backward();
      const auto yv = y.to_vector<float>(), yrv = yr.to_vector<float>();
      for (size_t i = 0; i < yv.size(); ++i)
        REQUIRE(yv[i] == Approx(yrv[i]).epsilon(1e-5).margin(1e-4));
      const auto gx = x.grad().to_vector<float>(), gxr = r(xr.grad()).to_vector<float>();
      for (size_t i = 0; i < gx.size(); ++i)
        REQUIRE(gx[i] == Approx(gxr[i]).epsilon(1e-2).margin(1e-2));
      const auto gw = w.grad().to_vector<float>(), gwr = wr.grad().to_vector<float>();
      for (size_t i = 0; i < gw.size(); ++i)
        REQUIRE(gw[i] == Approx(gwr[i]).epsilon(1e-5).margin(1e-4));
      const auto gb = b.grad().to_vector<float>(), gbr = ops::sum(g, {0, 2, 3}).to_vector<float>();
      for (size_t i = 0; i < gb.size(); ++i)
        REQUIRE(gb[i] == Approx(gbr[i]).epsilon(1e-5).margin(1e-4));
    }
  }
  // Grouped convolutions keep the rounded float32 path.
  Tensor xg = rand(Shape{2, 4, 5, 5}), wg = rand(Shape{4, 2, 3, 3});
  Tensor yg;
  {
    PrecisionScope scope(Precision::kBFloat16);
    yg = ops::conv2d(xg, wg, Tensor(), {{1, 1}, {1, 1}, {1, 1}, 2});
  }
  CHECK(yg.dtype() == DType::kFloat32);
  CHECK(yg.to_vector<float>() ==
        ops::conv2d(r(xg), r(wg), Tensor(), {{1, 1}, {1, 1}, {1, 1}, 2}).to_vector<float>());
  // A bfloat16 input with a bfloat16 bias (a float32 weight) is not the
  // bf16 kernels' contract: it is widened (this threw inside the kernel
  // before), the float32 convolution of bf16 precision rounded once.
  const Tensor xb = ops::cast(xg, DType::kBFloat16);
  const Tensor bb = ops::cast(rand(Shape{4}), DType::kBFloat16);
  const Tensor w1 = rand(Shape{4, 4, 3, 3});
  Tensor yb, yb_ref;
  {
    PrecisionScope scope(Precision::kBFloat16);
    yb = ops::conv2d(xb, w1, bb, {{1, 1}, {1, 1}, {1, 1}, 1});
    yb_ref = ops::cast(ops::conv2d(ops::cast(xb, DType::kFloat32), w1,
                                   ops::cast(bb, DType::kFloat32), {{1, 1}, {1, 1}, {1, 1}, 1}),
                       DType::kBFloat16);
  }
  CHECK(yb.dtype() == DType::kBFloat16);
  auto wide = [](const Tensor& t) { return ops::cast(t, DType::kFloat32).to_vector<float>(); };
  CHECK(wide(yb) == wide(yb_ref));
}

namespace {
Tensor randn_t(const Shape& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (float& x : v) x = normal(rng);
  return Tensor::from_vector(v, shape);
}
std::vector<float> as_float(const Tensor& t) {
  return ops::cast(t, DType::kFloat32).to_vector<float>();
}
// The float32 result rounded to `dtype` and read back as float32.
std::vector<float> rounded_to(const Tensor& t, DType dtype) {
  return as_float(ops::cast(t, dtype));
}
}  // namespace

// Note [16-bit kernels] in ops/dispatch.h: an op given 16-bit tensors computes exactly what
// its float32 kernel computes on the widened values, rounded once to the
// 16-bit dtype; statistics, losses and parameter gradients stay float32;
// an input's gradient has the input's dtype.
TEST_CASE("16-bit inputs: float32 kernels on widened copies, 16-bit outputs and gradients") {
  for (const DType half : {DType::kBFloat16, DType::kFloat16}) {
    INFO("dtype " << half);
    const Tensor x32 = randn_t({6, 40}, 11);
    const Tensor xh0 = ops::cast(x32, half);
    const Tensor xw = ops::cast(xh0, DType::kFloat32);  // the values the 16-bit x holds
    const Tensor gamma = randn_t({40}, 12), beta = randn_t({40}, 13), up = randn_t({6, 40}, 14);
    const Tensor uph = ops::cast(up, half);

    SECTION("layer_norm") {
      Tensor xh = xh0.detach(), g = gamma.clone(), b = beta.clone();
      xh.set_requires_grad(true);
      g.set_requires_grad(true);
      b.set_requires_grad(true);
      const Tensor y = ops::layer_norm(xh, g, b, 1e-5);
      REQUIRE(y.dtype() == half);
      ops::sum(ops::mul(ops::cast(y, DType::kFloat32), ops::cast(uph, DType::kFloat32))).backward();
      Tensor xr = xw.detach(), gr = gamma.clone(), br = beta.clone();
      xr.set_requires_grad(true);
      gr.set_requires_grad(true);
      br.set_requires_grad(true);
      const Tensor yr = ops::layer_norm(xr, gr, br, 1e-5);
      ops::sum(ops::mul(yr, ops::cast(uph, DType::kFloat32))).backward();
      CHECK(as_float(y) == rounded_to(yr, half));
      REQUIRE(xh.grad().dtype() == half);
      REQUIRE(g.grad().dtype() == DType::kFloat32);
      CHECK(as_float(xh.grad()) == rounded_to(xr.grad(), half));
      CHECK(g.grad().to_vector<float>() == gr.grad().to_vector<float>());
      CHECK(b.grad().to_vector<float>() == br.grad().to_vector<float>());
    }
    SECTION("layer_norm reads 16-bit rows itself: any width, parameters in either dtype") {
      // The CPU kernel widens one row at a time into a buffer: bit for bit
      // the float32 kernel on widened copies (its sums do not depend on the
      // row's address), with gamma / beta float32 or 16-bit, or absent.
      for (const int64_t d : {int64_t{1}, int64_t{37}, int64_t{600}}) {
        for (int affine = 0; affine < 3; ++affine) {  // float32, 16-bit, none
          INFO("d = " << d << ", parameters "
                      << (affine == 0   ? "float32"
                          : affine == 1 ? "16-bit"
                                        : "none"));
          const Tensor xv = ops::cast(ops::cast(randn_t({41, d}, 40 + d), half), DType::kFloat32);
          const Tensor gv = ops::cast(ops::cast(randn_t({d}, 41), half), DType::kFloat32);
          const Tensor bv = ops::cast(ops::cast(randn_t({d}, 42), half), DType::kFloat32);
          const Tensor upv = ops::cast(ops::cast(randn_t({41, d}, 43), half), DType::kFloat32);
          auto run = [&](DType act, DType par, Tensor& x, Tensor& g, Tensor& b) {
            x = ops::cast(xv, act).detach();
            x.set_requires_grad(true);
            if (affine < 2) {
              g = ops::cast(gv, par).detach();
              b = ops::cast(bv, par).detach();
              g.set_requires_grad(true);
              b.set_requires_grad(true);
            }
            const Tensor y = ops::layer_norm(x, g, b, 1e-5);
            REQUIRE(y.dtype() == act);
            ops::sum(ops::mul(ops::cast(y, DType::kFloat32), upv)).backward();
            return y;
          };
          Tensor x, g, b, xr, gr, br;
          const Tensor y = run(half, affine == 1 ? half : DType::kFloat32, x, g, b);
          const Tensor yr = run(DType::kFloat32, DType::kFloat32, xr, gr, br);
          CHECK(as_float(y) == rounded_to(yr, half));
          REQUIRE(x.grad().dtype() == half);
          CHECK(as_float(x.grad()) == rounded_to(xr.grad(), half));
          if (affine < 2) {
            // float32 parameter gradients of the same float32 sums; a 16-bit
            // parameter's gradient is rounded once by its cast.
            const DType pd = affine == 1 ? half : DType::kFloat32;
            REQUIRE(g.grad().dtype() == pd);
            CHECK(as_float(g.grad()) == rounded_to(gr.grad(), pd));
            CHECK(as_float(b.grad()) == rounded_to(br.grad(), pd));
          }
        }
      }
    }
    SECTION("bias + activation (the linear epilogue)") {
      // The CPU kernel reads 16-bit rows itself: bit for bit the float32
      // kernel on the widened values, each output rounded once; the bias
      // gradient (float32, like the bias) equal to the float32 one.
      for (const ops::FusedActivation act :
           {ops::FusedActivation::kGelu, ops::FusedActivation::kRelu,
            ops::FusedActivation::kNone}) {
        Tensor xh = xh0.detach(), b = beta.clone();
        xh.set_requires_grad(true);
        b.set_requires_grad(true);
        const Tensor y = ops::bias_activation(xh, b, act);
        REQUIRE(y.dtype() == half);
        ops::sum(ops::mul(ops::cast(y, DType::kFloat32), ops::cast(uph, DType::kFloat32)))
            .backward();
        Tensor xr = xw.detach(), br = beta.clone();
        xr.set_requires_grad(true);
        br.set_requires_grad(true);
        const Tensor yr = ops::bias_activation(xr, br, act);
        // The 16-bit gradient that reaches y is the rounded upstream one.
        ops::sum(ops::mul(yr, ops::cast(uph, DType::kFloat32))).backward();
        CHECK(as_float(y) == rounded_to(yr, half));
        REQUIRE(xh.grad().dtype() == half);
        CHECK(as_float(xh.grad()) == rounded_to(xr.grad(), half));
        REQUIRE(b.grad().dtype() == DType::kFloat32);
        // float32 sums of the same terms; an optimisation level may contract
        // the GELU derivative's multiply-adds differently in the two
        // instantiations (seen under -O1 with sanitizers): last-bit equal.
        const std::vector<float> gb = b.grad().to_vector<float>(),
                                 gbr = br.grad().to_vector<float>();
        for (size_t i = 0; i < gb.size(); ++i) CHECK(gb[i] == Approx(gbr[i]).epsilon(1e-6));
      }
    }
    SECTION("gelu, softmax and a residual add") {
      const Tensor y = ops::add(ops::softmax(ops::gelu(xh0), -1), xh0);
      REQUIRE(y.dtype() == half);
      // Each op rounds its own output, as the fused kernels' callers see it.
      const Tensor g1 = ops::cast(ops::gelu(xw), half);
      const Tensor s1 = ops::cast(ops::softmax(ops::cast(g1, DType::kFloat32), -1), half);
      const Tensor r = ops::add(ops::cast(s1, DType::kFloat32), xw);
      CHECK(as_float(y) == rounded_to(r, half));
    }
    SECTION("a 16-bit operand next to a float32 one is widened") {
      const Tensor y = ops::mul(xh0, gamma);
      REQUIRE(y.dtype() == DType::kFloat32);
      CHECK(y.to_vector<float>() == ops::mul(xw, gamma).to_vector<float>());
      const Tensor c = ops::concat({xh0, x32}, 0);
      REQUIRE(c.dtype() == DType::kFloat32);
      CHECK(c.to_vector<float>() == ops::concat({xw, x32}, 0).to_vector<float>());
    }
    SECTION("cross-entropy on 16-bit logits: float32 loss, 16-bit gradient") {
      // The CPU kernel reads 16-bit rows itself (no float32 copy of the
      // logits): the same loss as float32 on the widened values, and their
      // gradient rounded once; with and without smoothing and ignored rows.
      for (const double smoothing : {0.0, 0.1}) {
        INFO("label smoothing " << smoothing);
        ops::CrossEntropyOptions opt;
        opt.label_smoothing = smoothing;
        opt.ignore_index = -1;
        Tensor xh = xh0.detach();
        xh.set_requires_grad(true);
        const Tensor targets = Tensor::from_vector<int64_t>({0, 5, -1, 39, 7, 1}, {6});
        const Tensor loss = ops::mul_scalar(ops::cross_entropy(xh, targets, opt), 3.0);
        REQUIRE(loss.dtype() == DType::kFloat32);
        loss.backward();
        Tensor xr = xw.detach();
        xr.set_requires_grad(true);
        const Tensor lr = ops::mul_scalar(ops::cross_entropy(xr, targets, opt), 3.0);
        lr.backward();
        CHECK(loss.to_vector<float>() == lr.to_vector<float>());
        REQUIRE(xh.grad().dtype() == half);
        const std::vector<float> g = as_float(xh.grad());
        CHECK(g == rounded_to(xr.grad(), half));
        for (int j = 0; j < 40; ++j) CHECK(g[2 * 40 + j] == 0.0f);  // the ignored row
      }
    }
  }
  // A parameter that is neither the input's dtype nor float32 is named.
  const Tensor xb = ops::cast(randn_t({2, 4}, 31), DType::kBFloat16);
  CHECK_THROWS_WITH(ops::layer_norm(xb, Tensor::full({4}, 1.0, DType::kFloat64), Tensor(), 1e-5),
                    Contains("layer_norm: gamma has dtype float64 but the input has bfloat16"));
  // Integers are still refused, naming the op.
  CHECK_THROWS_WITH(ops::gelu(Tensor::zeros({2}, DType::kInt64)),
                    Contains("gelu: expected a float32 or float64 tensor"));
}

TEST_CASE("linear under bf16 with a bfloat16 input returns bfloat16, keeps the fp32 reference") {
  PrecisionScope scope(Precision::kBFloat16);
  const Tensor x32 = randn_t({5, 16}, 21), w = randn_t({12, 16}, 22), b = randn_t({12}, 23);
  const Tensor xh = ops::cast(x32, DType::kBFloat16);
  const Tensor y = ops::linear(xh, w, b, ops::FusedActivation::kGelu);
  REQUIRE(y.dtype() == DType::kBFloat16);
  // The float32 input path (the same bfloat16 products), rounded: the
  // product is rounded once more before the bias and GELU.
  const Tensor prod = ops::cast(ops::linear(xh, w, Tensor()), DType::kFloat32);
  const Tensor ref = ops::gelu(ops::add(prod, b));
  // The fused epilogue's GELU may differ from ops::gelu in the last float32
  // bits, which can move a rounding by one bfloat16 step.
  const std::vector<float> got = as_float(y), want = rounded_to(ref, DType::kBFloat16);
  for (size_t i = 0; i < got.size(); ++i)
    CHECK(got[i] == Approx(want[i]).epsilon(8e-3).margin(1e-6));
}

TEST_CASE("linear with a 16-bit input makes a large output a block of rows at a time") {
  // [2, 100, 8] x [16384, 8]^T: 200 rows of 16384 columns, more than one
  // 4 MB block of float32 rows (64 rows each here); the blocks' rounded
  // products must form the same tensor as the whole product rounded once.
  for (const DType half : {DType::kBFloat16, DType::kFloat16}) {
    INFO("dtype " << half);
    PrecisionScope scope(half == DType::kBFloat16 ? Precision::kBFloat16 : Precision::kFloat16);
    Tensor xh = ops::cast(randn_t({2, 100, 8}, 41), half).detach();
    Tensor w = ops::mul_scalar(randn_t({16384, 8}, 42), 0.3);
    xh.set_requires_grad(true);
    w.set_requires_grad(true);
    const Tensor y = ops::linear(xh, w, Tensor());
    REQUIRE(y.dtype() == half);
    REQUIRE(y.shape() == Shape({2, 100, 16384}));
    const Tensor up = ops::cast(randn_t({2, 100, 16384}, 43), half);
    ops::sum(ops::mul(ops::cast(y, DType::kFloat32), ops::cast(up, DType::kFloat32))).backward();
    // Written out in float32 on the rounded values, the product whole.
    auto r = [&](const Tensor& t) { return ops::cast(ops::cast(t, half), DType::kFloat32); };
    const Tensor xr = ops::cast(xh.detach(), DType::kFloat32), wr = r(w.detach());
    const Tensor upr = ops::cast(up, DType::kFloat32);
    const std::vector<float> got = as_float(y),
                             want = rounded_to(ops::matmul(xr, wr, false, true), half);
    // Sums of 8 products in another order may move a rounding by one step.
    const double step = half == DType::kBFloat16 ? 1.0 / 128 : 1.0 / 1024;
    int64_t off = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      REQUIRE(std::abs(got[i] - want[i]) <= step * std::abs(want[i]) + 1e-6);
      off += got[i] != want[i];
    }
    CHECK(off * 1000 < static_cast<int64_t>(got.size()));  // rare: almost all bit-equal
    const std::vector<float> gx = as_float(xh.grad()),
                             gx_want = rounded_to(ops::matmul(upr, wr), half);
    for (size_t i = 0; i < gx.size(); ++i)
      REQUIRE(gx[i] == Approx(gx_want[i]).epsilon(1e-2).margin(1e-2));
    const std::vector<float> gw = w.grad().to_vector<float>();
    const std::vector<float> gw_want =
        ops::matmul(ops::reshape(upr, {-1, 16384}), ops::reshape(xr, {-1, 8}), true)
            .to_vector<float>();
    for (size_t i = 0; i < gw.size(); ++i)
      REQUIRE(gw[i] == Approx(gw_want[i]).epsilon(1e-4).margin(1e-3));
  }
}

TEST_CASE("16-bit tensors meet float32 ones: seeds, parameters and the composed fallbacks") {
  const Tensor x32 = randn_t({6, 40}, 51);
  const Tensor xh0 = ops::cast(x32, DType::kBFloat16);
  SECTION("a bfloat16 seed for a float32 loss is widened, exactly") {
    const Tensor targets = Tensor::from_vector<int64_t>({0, 5, 9, 39, 7, 1}, {6});
    Tensor a = xh0.detach(), b = xh0.detach();
    a.set_requires_grad(true);
    b.set_requires_grad(true);
    const Tensor la = ops::cross_entropy(a, targets, {}), lb = ops::cross_entropy(b, targets, {});
    REQUIRE(la.dtype() == DType::kFloat32);
    backward({la}, {Tensor::full({}, 0.5, DType::kBFloat16)});
    backward({lb}, {Tensor::full({}, 0.5, DType::kFloat32)});
    CHECK(as_float(a.grad()) == as_float(b.grad()));
  }
  SECTION("layer norm's gamma and beta must share a dtype") {
    CHECK_THROWS_WITH(ops::layer_norm(xh0, Tensor::full({40}, 1.0, DType::kFloat32),
                                      Tensor::full({40}, 0.0, DType::kBFloat16), 1e-5),
                      Contains("layer_norm: gamma has dtype float32 but beta has bfloat16"));
  }
  SECTION("composed bias + activation and attention keep the 16-bit dtype") {
    // The forms devices without the fused kernels (CUDA) run: float32
    // inside, rounded once to the input's dtype, as the fused kernels are.
    const Tensor bias = randn_t({40}, 52);
    const Tensor fused = ops::bias_activation(xh0, bias, ops::FusedActivation::kGelu);
    const Tensor composed = ops::bias_activation_composed(xh0, bias, ops::FusedActivation::kGelu);
    REQUIRE(fused.dtype() == DType::kBFloat16);
    REQUIRE(composed.dtype() == DType::kBFloat16);
    const std::vector<float> f = as_float(fused), c = as_float(composed);
    for (size_t i = 0; i < f.size(); ++i)  // GELU's two forms may move a rounding by one step
      CHECK(c[i] == Approx(f[i]).epsilon(8e-3).margin(1e-6));
    const Tensor q = ops::cast(randn_t({2, 5, 8}, 53), DType::kBFloat16);
    const Tensor k = ops::cast(randn_t({2, 7, 8}, 54), DType::kBFloat16);
    const Tensor v = ops::cast(randn_t({2, 7, 8}, 55), DType::kBFloat16);
    const Tensor af = ops::attention(q, k, v, 2, false, Tensor());
    const Tensor ac = ops::attention_composed(q, k, v, 2, false, Tensor());
    REQUIRE(af.dtype() == DType::kBFloat16);
    REQUIRE(ac.dtype() == DType::kBFloat16);
    // The composed form also rounds the scores and probabilities.
    const std::vector<float> fa = as_float(af), ca = as_float(ac);
    for (size_t i = 0; i < fa.size(); ++i) CHECK(ca[i] == Approx(fa[i]).epsilon(3e-2).margin(1e-2));
  }
}
