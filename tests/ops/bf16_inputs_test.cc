// 16-bit tensors as inputs: float32 kernels on widened copies give 16-bit
// outputs and gradients; linear keeps its float32 reference; large outputs
// are made a block of rows at a time; 16-bit tensors meet float32 ones.
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
