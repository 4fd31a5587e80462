// dropout beyond the op table: the mask is a pure function of the RngContext
// (and salt), so recomputation reproduces it; statistics of the mask; and
// rematerialised vs plain gradients.
#include "ops/dropout.h"

#include <catch2/catch.hpp>
#include <cmath>

#include "core/autograd.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "ops/layer_norm.h"

namespace gpipe {
namespace {

RngContext context(uint64_t micro_batch, uint64_t layer) {
  return RngContext{.seed = 1234, .step = 3, .micro_batch = micro_batch, .layer = layer};
}

std::vector<float> dropped_ones(const RngContext& ctx, const Shape& shape, double p,
                                uint64_t salt = 0) {
  RngScope scope(ctx);
  return ops::dropout(Tensor::full(shape, 1.0), p, true, salt).to_vector<float>();
}

TEST_CASE("dropout: the same context gives the same mask") {
  CHECK(dropped_ones(context(0, 0), {64, 33}, 0.5) == dropped_ones(context(0, 0), {64, 33}, 0.5));
}

TEST_CASE("dropout: another micro-batch, layer, step or salt gives another mask") {
  const auto base = dropped_ones(context(0, 0), {1000}, 0.5);
  CHECK(base != dropped_ones(context(1, 0), {1000}, 0.5));
  CHECK(base != dropped_ones(context(0, 1), {1000}, 0.5));
  CHECK(base != dropped_ones(context(0, 0), {1000}, 0.5, /*salt=*/1));
  RngContext later = context(0, 0);
  later.step = 4;
  CHECK(base != dropped_ones(later, {1000}, 0.5));
}

TEST_CASE("dropout: the mask does not depend on the thread count or dtype") {
  const RngContext ctx = context(2, 5);
  std::vector<float> one, many;
  {
    ThreadPool pool(1);
    IntraOpScope scope(&pool);
    one = dropped_ones(ctx, {300, 700}, 0.25);
  }
  {
    ThreadPool pool(4);
    IntraOpScope scope(&pool);
    many = dropped_ones(ctx, {300, 700}, 0.25);
  }
  CHECK(one == many);
  RngScope scope(ctx);
  const auto d64 =
      ops::dropout(Tensor::full({300, 700}, 1.0, DType::kFloat64), 0.25, true).to_vector<double>();
  bool same = true;
  for (size_t i = 0; i < d64.size(); ++i) same = same && ((d64[i] == 0) == (one[i] == 0));
  CHECK(same);
}

TEST_CASE("dropout: the fraction dropped is close to p and the mean is kept") {
  const int64_t n = 100000;
  for (double p : {0.1, 0.5, 0.9}) {
    const auto y = dropped_ones(context(0, 7), {n}, p);
    int64_t zeros = 0, badly_scaled = 0;
    double sum = 0;
    for (float v : y) {
      if (v == 0.0f) {
        ++zeros;
      } else if (std::abs(v - 1.0 / (1.0 - p)) > 1e-5) {
        ++badly_scaled;
      }
      sum += v;
    }
    CHECK(badly_scaled == 0);
    const double frac = static_cast<double>(zeros) / n;
    // 5 binomial standard deviations.
    const double tol = 5 * std::sqrt(p * (1 - p) / n);
    CHECK(std::abs(frac - p) < tol);
    CHECK(std::abs(sum / n - 1.0) < 5 * std::sqrt(p / (1 - p) / n));
  }
}

TEST_CASE("dropout: eval mode and p == 0 return the input itself") {
  Tensor x = Tensor::randn({3, 4}, 1);
  CHECK(ops::dropout(x, 0.5, false).shares_storage_with(x));
  CHECK(ops::dropout(x, 0.0, true).shares_storage_with(x));
}

TEST_CASE("dropout: p outside [0, 1) is an error") {
  Tensor x = Tensor::zeros({2});
  REQUIRE_THROWS_WITH(ops::dropout(x, 1.0, true), Catch::Contains("dropout: p must be in [0, 1)"));
  REQUIRE_THROWS_WITH(ops::dropout(x, -0.1, false), Catch::Contains("got -0.1"));
  REQUIRE_THROWS_WITH(ops::dropout(Tensor::zeros({2}, DType::kInt32), 0.1, true),
                      Catch::Contains("dropout"));
}

TEST_CASE("dropout: the gradient is the mask, even after the context changed") {
  Tensor x = Tensor::randn({50, 20}, 2, 1.0, DType::kFloat64).set_requires_grad(true);
  Tensor y;
  {
    RngScope scope(context(3, 1));
    y = ops::dropout(x, 0.4, true);
  }
  RngScope other(context(9, 9));  // backward runs under another context
  y.backward(Tensor::full({50, 20}, 1.0, DType::kFloat64));
  const auto g = x.grad().to_vector<double>(), v = y.to_vector<double>(),
             xv = x.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) CHECK(std::abs(g[i] * xv[i] - v[i]) < 1e-12);
}

TEST_CASE("dropout: recomputation through rematerialise gives identical gradients") {
  const RngContext ctx = context(1, 2);
  Tensor x0 = Tensor::randn({8, 16}, 3, 1.0, DType::kFloat32);
  Tensor gamma0 = Tensor::randn({16}, 4, 0.2, DType::kFloat32);
  Tensor g = Tensor::randn({8, 16}, 5, 1.0, DType::kFloat32);
  auto block = [](const std::vector<Tensor>& in) {
    Tensor h = ops::dropout(in[0], 0.3, true, /*salt=*/0);
    h = ops::layer_norm(h, in[1], Tensor());
    return std::vector<Tensor>{ops::dropout(h, 0.2, true, /*salt=*/1)};
  };

  Tensor x1 = x0.clone().set_requires_grad(true), gamma1 = gamma0.clone().set_requires_grad(true);
  Tensor x2 = x0.clone().set_requires_grad(true), gamma2 = gamma0.clone().set_requires_grad(true);
  Tensor plain, remat;
  {
    RngScope scope(ctx);
    plain = block({x1, gamma1})[0];
    remat = rematerialise(block, {x2, gamma2})[0];
  }
  CHECK(plain.to_vector<float>() == remat.to_vector<float>());
  // Backward outside the scope: rematerialise restores the forward's context.
  plain.backward(g);
  remat.backward(g);
  CHECK(x1.grad().to_vector<float>() == x2.grad().to_vector<float>());
  CHECK(gamma1.grad().to_vector<float>() == gamma2.grad().to_vector<float>());
}

}  // namespace
}  // namespace gpipe
