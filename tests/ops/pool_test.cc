// Pooling beyond the op table: error messages, float32 vs float64, tie and
// overlap behaviour of max pooling's gradient, -inf padding, the two
// average-pooling divisors, NaN propagation and global average pooling.
#include "ops/pool.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"

using namespace gpipe;
using Catch::Contains;

namespace {

Tensor rnd(const Shape& s, uint64_t seed, DType dtype = DType::kFloat64) {
  return Tensor::uniform(s, seed, -1.0, 1.0, dtype);
}

ops::Pool2dOptions pool(std::array<int64_t, 2> k, std::array<int64_t, 2> s,
                        std::array<int64_t, 2> p, bool include_pad = true) {
  return ops::Pool2dOptions{k, s, p, include_pad};
}

double max_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  const auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < va.size(); ++i) m = std::max(m, std::abs(va[i] - vb[i]));
  return m;
}

}  // namespace

TEST_CASE("pool: bad inputs give readable errors") {
  const Tensor x = rnd(Shape{1, 2, 5, 5}, 1);
  CHECK_THROWS_WITH(
      ops::max_pool2d(rnd(Shape{2, 5, 5}, 1), pool({2, 2}, {2, 2}, {0, 0})),
      Contains("max_pool2d: expected input [N, C, H, W] of rank 4, got shape [2, 5, 5]"));
  CHECK_THROWS_WITH(ops::avg_pool2d(x, pool({0, 2}, {2, 2}, {0, 0})),
                    Contains("avg_pool2d: kernel size must be positive, got [0, 2]"));
  CHECK_THROWS_WITH(ops::max_pool2d(x, pool({2, 2}, {2, 0}, {0, 0})),
                    Contains("max_pool2d: stride must be positive, got [2, 0]"));
  CHECK_THROWS_WITH(ops::max_pool2d(x, pool({3, 3}, {1, 1}, {-1, 0})),
                    Contains("padding must be non-negative, got [-1, 0]"));
  CHECK_THROWS_WITH(ops::avg_pool2d(x, pool({3, 3}, {1, 1}, {2, 1})),
                    Contains("avg_pool2d: padding [2, 1] must be at most half the kernel [3, 3]"));
  CHECK_THROWS_WITH(ops::max_pool2d(x, pool({6, 2}, {1, 1}, {0, 0})),
                    Contains("max_pool2d: output size would be [0, 4]"));
  CHECK_THROWS_WITH(ops::max_pool2d(Tensor::zeros(Shape{1, 1, 4, 4}, DType::kInt32),
                                    pool({2, 2}, {2, 2}, {0, 0})),
                    Contains("expected a float32 or float64 tensor"));
  CHECK_THROWS_WITH(
      ops::global_avg_pool2d(rnd(Shape{2, 3}, 1)),
      Contains("global_avg_pool2d: expected input [N, C, H, W] of rank 4, got shape [2, 3]"));
}

TEST_CASE("pool: float32 agrees with float64, forward and backward") {
  const Tensor x = rnd(Shape{2, 3, 9, 8}, 2);
  const Tensor r = rnd(Shape{2, 3, 5, 4}, 3);
  for (int kind = 0; kind < 3; ++kind) {
    INFO("kind " << kind);
    const ops::Pool2dOptions opt = pool({3, 3}, {2, 2}, {1, 1}, kind != 2);
    auto run = [&](DType dtype, Tensor& grad) {
      Tensor xi = x.to(dtype).clone().set_requires_grad(true);
      Tensor y = kind == 0 ? ops::max_pool2d(xi, opt) : ops::avg_pool2d(xi, opt);
      ops::sum(ops::mul(y, r.to(dtype))).backward();
      grad = xi.grad();
      return y;
    };
    Tensor gd, gf;
    const Tensor yd = run(DType::kFloat64, gd), yf = run(DType::kFloat32, gf);
    CHECK(yf.dtype() == DType::kFloat32);
    CHECK(max_diff(yd, yf) < 1e-6);
    CHECK(max_diff(gd, gf) < 1e-6);
  }
}

TEST_CASE("max_pool2d: ties send the gradient to the first maximum; overlaps add up") {
  Tensor x = Tensor::full(Shape{1, 1, 2, 2}, 3.0, DType::kFloat64).set_requires_grad(true);
  ops::sum(ops::max_pool2d(x, pool({2, 2}, {2, 2}, {0, 0}))).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{1, 0, 0, 0});

  // 3x3 stride 1 on a ramp: each output picks its window's bottom-right corner.
  std::vector<double> ramp(9);
  for (int i = 0; i < 9; ++i) ramp[i] = i;
  Tensor y0 = Tensor::from_vector(ramp, Shape{1, 1, 3, 3}).set_requires_grad(true);
  Tensor y = ops::max_pool2d(y0, pool({3, 3}, {1, 1}, {1, 1}));
  CHECK(y.to_vector<double>() == std::vector<double>{4, 5, 5, 7, 8, 8, 7, 8, 8});
  ops::sum(y).backward();
  CHECK(y0.grad().to_vector<double>() == std::vector<double>{0, 0, 0, 0, 1, 2, 0, 2, 4});
}

TEST_CASE("max_pool2d: padding never wins over negative inputs") {
  const Tensor x = Tensor::full(Shape{1, 1, 3, 3}, -5.0, DType::kFloat64);
  const Tensor y = ops::max_pool2d(x, pool({3, 3}, {2, 2}, {1, 1}));
  CHECK(y.to_vector<double>() == std::vector<double>{-5, -5, -5, -5});
}

TEST_CASE("max_pool2d: NaN propagates") {
  Tensor x = Tensor::zeros(Shape{1, 1, 2, 4}, DType::kFloat32);
  x.set({0, 0, 1, 0}, std::numeric_limits<double>::quiet_NaN());
  x.set({0, 0, 1, 1}, 7.0);
  const auto y = ops::max_pool2d(x, pool({2, 2}, {2, 2}, {0, 0})).to_vector<float>();
  CHECK(std::isnan(y[0]));
  CHECK(y[1] == 0.0f);
}

TEST_CASE("avg_pool2d: count_include_pad chooses the divisor at the borders") {
  const Tensor ones = Tensor::full(Shape{1, 1, 3, 3}, 1.0, DType::kFloat64);
  const auto with_pad =
      ops::avg_pool2d(ones, pool({3, 3}, {1, 1}, {1, 1}, true)).to_vector<double>();
  const auto without =
      ops::avg_pool2d(ones, pool({3, 3}, {1, 1}, {1, 1}, false)).to_vector<double>();
  const std::vector<double> expect = {4.0 / 9, 6.0 / 9, 4.0 / 9, 6.0 / 9, 1,
                                      6.0 / 9, 4.0 / 9, 6.0 / 9, 4.0 / 9};
  for (size_t i = 0; i < 9; ++i) {
    CHECK(std::abs(with_pad[i] - expect[i]) < 1e-15);
    CHECK(std::abs(without[i] - 1.0) < 1e-15);
  }
  // Windows running past the bottom-right edge of a 4x4 input (kernel 3,
  // stride 2, pad 1): PyTorch's divisor clips the window to the padded input.
  const Tensor ones4 = Tensor::full(Shape{1, 1, 4, 4}, 1.0, DType::kFloat64);
  const auto clipped =
      ops::avg_pool2d(ones4, pool({3, 3}, {2, 2}, {1, 1}, true)).to_vector<double>();
  CHECK(clipped == std::vector<double>{4.0 / 9, 6.0 / 9, 6.0 / 9, 1.0});
}

TEST_CASE("global_avg_pool2d: mean over the plane, gradient spread evenly") {
  Tensor x = rnd(Shape{2, 3, 4, 5}, 4).set_requires_grad(true);
  Tensor y = ops::global_avg_pool2d(x);
  REQUIRE(y.shape() == Shape{2, 3});
  CHECK(std::abs(y.at({1, 2}) - ops::mean(x.detach(), {2, 3}).at({1, 2})) < 1e-15);
  ops::sum(y).backward();
  for (double g : x.grad().to_vector<double>()) CHECK(std::abs(g - 1.0 / 20) < 1e-15);
}

// A direct window loop: the first maximal element in row-major window order,
// a NaN winning from where it appears, a window of -inf only giving its first
// in-bounds element; returns y and grad_x for the output weights w.
static void reference_max_pool(const std::vector<float>& x, int64_t planes, int64_t h, int64_t w,
                               const ops::Pool2dOptions& o, const std::vector<float>& wy,
                               std::vector<float>& y, std::vector<float>& gx) {
  const int64_t oh = (h + 2 * o.padding[0] - o.kernel[0]) / o.stride[0] + 1;
  const int64_t ow = (w + 2 * o.padding[1] - o.kernel[1]) / o.stride[1] + 1;
  y.assign(planes * oh * ow, 0.0f);
  gx.assign(planes * h * w, 0.0f);
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t r = 0; r < oh; ++r)
      for (int64_t q = 0; q < ow; ++q) {
        int64_t best = -1;
        for (int64_t i = 0; i < o.kernel[0]; ++i)
          for (int64_t j = 0; j < o.kernel[1]; ++j) {
            const int64_t row = r * o.stride[0] + i - o.padding[0];
            const int64_t col = q * o.stride[1] + j - o.padding[1];
            if (row < 0 || row >= h || col < 0 || col >= w) continue;
            const int64_t at = p * h * w + row * w + col;
            if (best < 0 || (!std::isnan(x[best]) && (x[at] > x[best] || std::isnan(x[at]))))
              best = at;
          }
        const int64_t out = (p * oh + r) * ow + q;
        y[out] = x[best];
        gx[best] += wy[out];
      }
}

TEST_CASE("max_pool2d: every path equals a direct window loop (values, ties, -inf, NaN, argmax)") {
  // Unit strides and short rows take the padded-plane path, long strided rows
  // the row path (ops/cpu/pool.cc); both must agree with the plain loop.
  struct Case {
    int64_t h, w;
    ops::Pool2dOptions o;
  };
  const std::vector<Case> cases = {
      {8, 8, pool({3, 3}, {1, 1}, {1, 1})},   {4, 4, pool({3, 3}, {2, 2}, {1, 1})},
      {1, 1, pool({3, 3}, {1, 1}, {1, 1})},   {2, 2, pool({2, 2}, {2, 2}, {0, 0})},
      {9, 40, pool({3, 3}, {2, 2}, {1, 1})},  {7, 50, pool({2, 3}, {1, 3}, {1, 1})},
      {33, 35, pool({3, 3}, {1, 1}, {1, 1})}, {6, 37, pool({3, 2}, {2, 2}, {0, 1})},
      {5, 20, pool({1, 1}, {1, 1}, {0, 0})}};
  for (size_t c = 0; c < cases.size(); ++c) {
    const Case& k = cases[c];
    INFO("case " << c << ": " << k.h << "x" << k.w);
    const int64_t planes = 6;
    // Small integers (many ties), one plane of -inf, NaNs in another.
    std::vector<float> x =
        Tensor::uniform(Shape{planes * k.h * k.w}, 10 + c, -3.0, 3.0).to_vector<float>();
    for (float& v : x) v = std::round(v);
    for (int64_t i = 0; i < k.h * k.w; ++i) x[i] = -std::numeric_limits<float>::infinity();
    x[k.h * k.w + (k.h * k.w) / 2] = std::numeric_limits<float>::quiet_NaN();
    x[2 * k.h * k.w + k.h * k.w - 1] = std::numeric_limits<float>::quiet_NaN();
    Tensor xt =
        Tensor::from_vector(x, Shape{2, 3, k.h, k.w}).to(DType::kFloat32).set_requires_grad(true);
    const Tensor y = ops::max_pool2d(xt, k.o);
    const Tensor wy = Tensor::uniform(y.shape(), 99 + c, 0.5, 1.5, DType::kFloat32);
    ops::sum(ops::mul(y, wy)).backward();
    std::vector<float> y_ref, g_ref;
    reference_max_pool(x, planes, k.h, k.w, k.o, wy.to_vector<float>(), y_ref, g_ref);
    const auto yv = y.to_vector<float>(), gv = xt.grad().to_vector<float>();
    REQUIRE(yv.size() == y_ref.size());
    for (size_t i = 0; i < yv.size(); ++i) {
      INFO("output " << i);
      CHECK((yv[i] == y_ref[i] || (std::isnan(yv[i]) && std::isnan(y_ref[i]))));
    }
    for (size_t i = 0; i < gv.size(); ++i) {
      INFO("input " << i);
      CHECK(gv[i] == g_ref[i]);
    }
  }
}
