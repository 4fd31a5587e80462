// batch_norm beyond the op table: running statistics are never touched,
// update_running_stats numbers, the fused backward against the composed
// version built from elementwise ops, eval-mode backward, float32 vs float64,
// many channels in [N, C], and error messages.
#include "ops/batch_norm.h"

#include <catch2/catch.hpp>
#include <cmath>

#include "core/autograd.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"
#include "ops/shape.h"

using namespace gpipe;
using Catch::Contains;

namespace {

Tensor rnd(const Shape& s, uint64_t seed, double lo = -1.0, double hi = 1.0,
           DType dtype = DType::kFloat64) {
  return Tensor::uniform(s, seed, lo, hi, dtype);
}

double max_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  const auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < va.size(); ++i) m = std::max(m, std::abs(va[i] - vb[i]));
  return m;
}

// Batch norm in training written with differentiable elementwise ops.
Tensor composed_batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps) {
  std::vector<int64_t> axes = {0}, param_shape = {1, x.size(1)};
  for (int64_t a = 2; a < x.rank(); ++a) {
    axes.push_back(a);
    param_shape.push_back(1);
  }
  const Tensor mean = ops::mean(x, axes, true);
  const Tensor centered = ops::sub(x, mean);
  const Tensor var = ops::mean(ops::mul(centered, centered), axes, true);
  const Tensor xhat = ops::div(centered, ops::sqrt(ops::add_scalar(var, eps)));
  return ops::add(ops::mul(xhat, ops::reshape(gamma, param_shape)),
                  ops::reshape(beta, param_shape));
}

struct Grads {
  Tensor y, gx, ggamma, gbeta;
};

template <class F>
Grads run(const Tensor& x0, const Tensor& gamma0, const Tensor& beta0, const F& f) {
  Tensor x = x0.clone().set_requires_grad(true);
  Tensor gamma = gamma0.clone().set_requires_grad(true);
  Tensor beta = beta0.clone().set_requires_grad(true);
  Tensor y = f(x, gamma, beta);
  ops::sum(ops::mul(y, rnd(y.shape(), 77).to(y.dtype()))).backward();
  return {y.detach(), x.grad(), gamma.grad(), beta.grad()};
}

void check_close(const Grads& a, const Grads& b, double tol) {
  CHECK(max_diff(a.y, b.y) < tol);
  CHECK(max_diff(a.gx, b.gx) < tol);
  CHECK(max_diff(a.ggamma, b.ggamma) < tol);
  CHECK(max_diff(a.gbeta, b.gbeta) < tol);
}

}  // namespace

TEST_CASE("batch_norm: never modifies the running statistics") {
  const Tensor x = rnd(Shape{4, 3, 2, 2}, 1, -2, 3);
  Tensor rm = rnd(Shape{3}, 2), rv = rnd(Shape{3}, 3, 0.5, 1.5);
  const auto rm0 = rm.to_vector<double>(), rv0 = rv.to_vector<double>();
  for (bool training : {true, false}) {
    const auto r = ops::batch_norm(x, Tensor(), Tensor(), rm, rv, training);
    CHECK(rm.to_vector<double>() == rm0);
    CHECK(rv.to_vector<double>() == rv0);
    CHECK(r.mean.defined() == training);
    CHECK(r.var.defined() == training);
  }
}

TEST_CASE("batch_norm: training returns detached batch statistics") {
  Tensor x = rnd(Shape{4, 2, 3}, 4).set_requires_grad(true);
  Tensor gamma = rnd(Shape{2}, 5).set_requires_grad(true);
  const auto r = ops::batch_norm(x, gamma, Tensor(), Tensor(), Tensor(), true);
  CHECK(r.y.requires_grad());
  CHECK_FALSE(r.mean.requires_grad());
  CHECK_FALSE(r.var.requires_grad());
  CHECK(r.mean.shape() == Shape{2});
  // Mean of channel 0 over N and the trailing axis.
  double s = 0;
  for (int64_t n = 0; n < 4; ++n)
    for (int64_t e = 0; e < 3; ++e) s += x.at({n, 0, e});
  CHECK(std::abs(r.mean.at({0}) - s / 12) < 1e-15);
}

TEST_CASE("update_running_stats: momentum blend with the unbiased variance") {
  Tensor rm = Tensor::from_vector<double>({0.0, 1.0}, Shape{2});
  Tensor rv = Tensor::from_vector<double>({1.0, 2.0}, Shape{2});
  const Tensor bm = Tensor::from_vector<double>({2.0, -1.0}, Shape{2});
  const Tensor bv = Tensor::from_vector<double>({3.0, 0.5}, Shape{2});
  ops::update_running_stats(rm, rv, bm, bv, 4, 0.1);
  // mean: 0.9 * 0 + 0.1 * 2 = 0.2; 0.9 * 1 + 0.1 * -1 = 0.8
  // var:  0.9 * 1 + 0.1 * 3 * 4/3 = 1.3; 0.9 * 2 + 0.1 * 0.5 * 4/3 = 1.8 + 1/15
  CHECK(std::abs(rm.at({0}) - 0.2) < 1e-15);
  CHECK(std::abs(rm.at({1}) - 0.8) < 1e-15);
  CHECK(std::abs(rv.at({0}) - 1.3) < 1e-15);
  CHECK(std::abs(rv.at({1}) - (1.8 + 1.0 / 15)) < 1e-15);

  // A float32 strided view is updated in place too.
  Tensor storage = Tensor::zeros(Shape{4}, DType::kFloat32);
  Tensor rm_view = ops::slice(storage, 0, 0, 4, 2);
  Tensor rv_view = ops::slice(storage, 0, 1, 4, 2);
  REQUIRE_FALSE(rm_view.is_contiguous());
  ops::update_running_stats(rm_view, rv_view, bm.to(DType::kFloat32), bv.to(DType::kFloat32), 4,
                            0.5);
  CHECK(storage.to_vector<float>() == std::vector<float>{1.0f, 2.0f, -0.5f, 1.0f / 3});
}

TEST_CASE("update_running_stats: bad inputs give readable errors") {
  Tensor rm = Tensor::zeros(Shape{2}, DType::kFloat64),
         rv = Tensor::zeros(Shape{2}, DType::kFloat64);
  const Tensor b = Tensor::zeros(Shape{2}, DType::kFloat64);
  CHECK_THROWS_WITH(
      ops::update_running_stats(rm, rv, b, b, 1, 0.1),
      Contains("update_running_stats: count (values per channel) must be at least 2, got 1"));
  CHECK_THROWS_WITH(ops::update_running_stats(rm, rv, b, b, 4, 1.5),
                    Contains("momentum must be in [0, 1], got 1.5"));
  CHECK_THROWS_WITH(
      ops::update_running_stats(rm, rv, Tensor::zeros(Shape{3}, DType::kFloat64), b, 4, 0.1),
      Contains("all [C], got [2], [2], [3], [2]"));
  CHECK_THROWS_WITH(ops::update_running_stats(rm, rv, b.to(DType::kFloat32), b, 4, 0.1),
                    Contains("dtype"));
}

TEST_CASE("batch_norm: the fused training backward equals the composed version") {
  for (const Shape& shape : {Shape{4, 3, 3, 2}, Shape{6, 5}, Shape{3, 2, 7}}) {
    INFO("x " << shape);
    const Tensor x = rnd(shape, 6, -2, 3), gamma = rnd(Shape{shape[1]}, 7, 0.5, 1.5);
    const Tensor beta = rnd(Shape{shape[1]}, 8);
    const Grads fused = run(x, gamma, beta, [](const Tensor& a, const Tensor& g, const Tensor& b) {
      return ops::batch_norm(a, g, b, Tensor(), Tensor(), true, 1e-3).y;
    });
    const Grads composed =
        run(x, gamma, beta, [](const Tensor& a, const Tensor& g, const Tensor& b) {
          return composed_batch_norm(a, g, b, 1e-3);
        });
    check_close(fused, composed, 1e-12);
  }
}

TEST_CASE("batch_norm: many channels in [N, C] (channel blocks in parallel)") {
  const Tensor x = rnd(Shape{5, 700}, 9, -1, 4), gamma = rnd(Shape{700}, 10),
               beta = rnd(Shape{700}, 11);
  const Grads fused = run(x, gamma, beta, [](const Tensor& a, const Tensor& g, const Tensor& b) {
    return ops::batch_norm(a, g, b, Tensor(), Tensor(), true).y;
  });
  const Grads composed = run(x, gamma, beta, [](const Tensor& a, const Tensor& g, const Tensor& b) {
    return composed_batch_norm(a, g, b, 1e-5);
  });
  check_close(fused, composed, 1e-10);
}

TEST_CASE("batch_norm: eval mode is an affine map, and so is its backward") {
  const Tensor x = rnd(Shape{3, 2, 2, 2}, 12), gamma = rnd(Shape{2}, 13, 0.5, 1.5),
               beta = rnd(Shape{2}, 14);
  const Tensor rm = rnd(Shape{2}, 15), rv = rnd(Shape{2}, 16, 0.5, 2.0);
  Tensor xi = x.clone().set_requires_grad(true);
  const Tensor y = ops::batch_norm(xi, gamma, beta, rm, rv, false, 1e-5).y;
  ops::sum(y).backward();
  for (int64_t c = 0; c < 2; ++c) {
    const double scale = gamma.at({c}) / std::sqrt(rv.at({c}) + 1e-5);
    CHECK(std::abs(y.at({1, c, 1, 0}) -
                   ((x.at({1, c, 1, 0}) - rm.at({c})) * scale + beta.at({c}))) < 1e-14);
    CHECK(std::abs(xi.grad().at({2, c, 0, 1}) - scale) < 1e-14);
  }
}

TEST_CASE("batch_norm: float32 agrees with float64, forward and backward") {
  const Tensor x = rnd(Shape{4, 3, 5, 5}, 17, -2, 3), gamma = rnd(Shape{3}, 18, 0.5, 1.5);
  const Tensor beta = rnd(Shape{3}, 19);
  auto f = [](const Tensor& a, const Tensor& g, const Tensor& b) {
    return ops::batch_norm(a, g, b, Tensor(), Tensor(), true).y;
  };
  const Grads d = run(x, gamma, beta, f);
  const Grads s =
      run(x.to(DType::kFloat32), gamma.to(DType::kFloat32), beta.to(DType::kFloat32), f);
  CHECK(s.y.dtype() == DType::kFloat32);
  check_close(d, s, 1e-4);
}

TEST_CASE("batch_norm: float32 block sums agree with float64 on planes of many blocks") {
  // 30x30 planes: float32 sums take 256-element blocks in float lanes, then
  // double (ops/cpu/batch_norm.cc, Note [Block sums]), plus a tail.
  const Tensor x = rnd(Shape{3, 2, 30, 30}, 21, -2, 3), gamma = rnd(Shape{2}, 22, 0.5, 1.5);
  const Tensor beta = rnd(Shape{2}, 23);
  const auto d = ops::batch_norm(x, gamma, beta, Tensor(), Tensor(), true);
  const auto s = ops::batch_norm(x.to(DType::kFloat32), gamma.to(DType::kFloat32),
                                 beta.to(DType::kFloat32), Tensor(), Tensor(), true);
  for (int64_t c = 0; c < 2; ++c) {
    CHECK(std::abs(s.mean.at({c}) - d.mean.at({c})) < 1e-6);
    CHECK(std::abs(s.var.at({c}) - d.var.at({c})) < 1e-6 * d.var.at({c}));
  }
  auto f = [](const Tensor& a, const Tensor& g, const Tensor& b) {
    return ops::batch_norm(a, g, b, Tensor(), Tensor(), true).y;
  };
  check_close(run(x, gamma, beta, f),
              run(x.to(DType::kFloat32), gamma.to(DType::kFloat32), beta.to(DType::kFloat32), f),
              1e-5);
}

TEST_CASE("batch_norm: float32 statistics stay accurate for a large mean") {
  // 1000 + U[-1, 1): the two-pass variance keeps the normalised output at
  // mean 0, variance 1 in float32.
  const Tensor x = ops::add_scalar(rnd(Shape{8, 2, 16, 16}, 20, -1, 1, DType::kFloat32), 1000.0);
  const auto r = ops::batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.0);
  const Tensor y = r.y.to(DType::kFloat64);
  const Tensor m = ops::mean(y, {0, 2, 3});
  const Tensor v = ops::mean(ops::mul(y, y), {0, 2, 3});
  for (int64_t c = 0; c < 2; ++c) {
    CHECK(std::abs(m.at({c})) < 1e-3);
    CHECK(std::abs(v.at({c}) - 1.0) < 1e-3);
    CHECK(std::abs(r.var.at({c}) - 1.0 / 3) < 1e-2);
  }
}

TEST_CASE("batch_norm: bad inputs give readable errors") {
  const Tensor x = rnd(Shape{4, 3, 2, 2}, 21), c3 = rnd(Shape{3}, 22, 0.5, 1.0);
  CHECK_THROWS_WITH(ops::batch_norm(rnd(Shape{4}, 1), Tensor(), Tensor(), Tensor(), Tensor(), true),
                    Contains("batch_norm: expected input [N, C] or [N, C, H, W], got shape [4]"));
  CHECK_THROWS_WITH(ops::batch_norm(x, rnd(Shape{4}, 1), Tensor(), Tensor(), Tensor(), true),
                    Contains("batch_norm: expected gamma [3] (one value per channel), got [4]"));
  CHECK_THROWS_WITH(ops::batch_norm(x, Tensor(), rnd(Shape{3, 1}, 1), Tensor(), Tensor(), true),
                    Contains("expected beta [3] (one value per channel), got [3, 1]"));
  CHECK_THROWS_WITH(ops::batch_norm(x, Tensor(), Tensor(), Tensor(), c3, false),
                    Contains("batch_norm: running_mean is undefined (required in eval mode)"));
  CHECK_THROWS_WITH(ops::batch_norm(x, Tensor(), Tensor(), c3, rnd(Shape{2}, 1), false),
                    Contains("expected running_var [3] (one value per channel), got [2]"));
  CHECK_THROWS_WITH(ops::batch_norm(x, c3.to(DType::kFloat32), Tensor(), Tensor(), Tensor(), true),
                    Contains("dtype"));
  CHECK_THROWS_WITH(
      ops::batch_norm(rnd(Shape{1, 3}, 1), Tensor(), Tensor(), Tensor(), Tensor(), true),
      Contains("expected more than 1 value per channel in training, got input [1, 3]"));
  CHECK_THROWS_WITH(ops::batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true, -1.0),
                    Contains("eps must be non-negative, got -1"));
  // One sample is fine in eval mode.
  CHECK(ops::batch_norm(rnd(Shape{1, 3}, 1), Tensor(), Tensor(), c3, c3, false).y.shape() ==
        Shape{1, 3});
}
