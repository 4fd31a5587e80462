// softmax / log_softmax beyond the op table: numerical stability, -inf
// entries, the blocked (inner > 1) path on wide inputs, float32 vs float64,
// and error messages.
#include "ops/softmax.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/parallel.h"
#include "ops/shape.h"

namespace gpipe {
namespace {

double max_diff(const Tensor& a, const Tensor& b) {
  const auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  REQUIRE(va.size() == vb.size());
  double m = 0;
  for (size_t i = 0; i < va.size(); ++i) m = std::max(m, std::abs(va[i] - vb[i]));
  return m;
}

TEST_CASE("softmax: huge logits do not overflow") {
  Tensor x = Tensor::from_vector<double>({1000.0, 1001.0, 1002.0, -1000.0, 0.0, 1000.0}, {2, 3});
  Tensor y = ops::softmax(x);
  const double e1 = std::exp(-1.0), e2 = std::exp(-2.0), z = 1 + e1 + e2;
  CHECK(std::abs(y.at({0, 0}) - e2 / z) < 1e-15);
  CHECK(std::abs(y.at({0, 2}) - 1 / z) < 1e-15);
  CHECK(y.at({1, 0}) == 0.0);
  CHECK(std::abs(y.at({1, 2}) - 1.0) < 1e-15);
  Tensor ly = ops::log_softmax(x);
  CHECK(std::abs(ly.at({1, 0}) + 2000.0) < 1e-9);
  CHECK(std::isfinite(ly.at({1, 1})));
}

TEST_CASE("softmax: -inf entries get probability 0 and no gradient") {
  const double inf = std::numeric_limits<double>::infinity();
  Tensor x = Tensor::from_vector<double>({0.5, -inf, 1.5, -inf}, {1, 4});
  x.set_requires_grad(true);
  Tensor y = ops::softmax(x);
  CHECK(y.at({0, 1}) == 0.0);
  CHECK(y.at({0, 3}) == 0.0);
  CHECK(std::abs(y.at({0, 0}) + y.at({0, 2}) - 1.0) < 1e-15);
  y.backward(Tensor::from_vector<double>({1.0, 2.0, 3.0, 4.0}, {1, 4}));
  const auto g = x.grad().to_vector<double>();
  for (double v : g) CHECK(std::isfinite(v));
  CHECK(g[1] == 0.0);
  CHECK(g[3] == 0.0);
}

TEST_CASE("softmax: a fully -inf row gives NaN (documented, caller's problem)") {
  const double inf = std::numeric_limits<double>::infinity();
  Tensor y = ops::softmax(Tensor::from_vector<double>({-inf, -inf}, {1, 2}));
  CHECK(std::isnan(y.at({0, 0})));
}

TEST_CASE("softmax: wide middle-axis input (blocked path) matches the last-axis path") {
  // [3, 7, 600]: softmax over axis 1 has inner = 600 > one column block.
  Tensor x = Tensor::randn({3, 7, 600}, 5, 2.0, DType::kFloat64);
  for (bool log : {false, true}) {
    Tensor x_req = x.clone().set_requires_grad(true);
    Tensor y = log ? ops::log_softmax(x_req, 1) : ops::softmax(x_req, 1);
    // The same thing via a transpose to the last axis.
    Tensor xt = x.clone().set_requires_grad(true);
    Tensor yt_last = log ? ops::log_softmax(ops::transpose(xt, 1, 2), -1)
                         : ops::softmax(ops::transpose(xt, 1, 2), -1);
    Tensor yt = ops::transpose(yt_last, 1, 2);
    CHECK(max_diff(y, yt) < 1e-14);
    Tensor g = Tensor::randn({3, 7, 600}, 6, 1.0, DType::kFloat64);
    y.backward(g);
    yt.backward(g);
    CHECK(max_diff(x_req.grad(), xt.grad()) < 1e-13);
  }
}

TEST_CASE("softmax: results do not depend on the thread count") {
  Tensor x = Tensor::randn({64, 300}, 7, 1.0, DType::kFloat32);
  Tensor y1, y4;
  {
    ThreadPool pool(1);
    IntraOpScope scope(&pool);
    y1 = ops::softmax(x, 0);
  }
  {
    ThreadPool pool(4);
    IntraOpScope scope(&pool);
    y4 = ops::softmax(x, 0);
  }
  CHECK(y1.to_vector<float>() == y4.to_vector<float>());
}

TEST_CASE("softmax: float32 agrees with float64, forward and backward") {
  Tensor x64 = Tensor::randn({5, 9, 4}, 8, 2.0, DType::kFloat64);
  Tensor g64 = Tensor::randn({5, 9, 4}, 9, 1.0, DType::kFloat64);
  for (bool log : {false, true}) {
    for (int64_t axis : {-1, 1}) {
      Tensor a = x64.clone().set_requires_grad(true);
      Tensor b = x64.to(DType::kFloat32).set_requires_grad(true);
      Tensor ya = log ? ops::log_softmax(a, axis) : ops::softmax(a, axis);
      Tensor yb = log ? ops::log_softmax(b, axis) : ops::softmax(b, axis);
      CHECK(yb.dtype() == DType::kFloat32);
      CHECK(max_diff(ya, yb) < 1e-5);
      ya.backward(g64);
      yb.backward(g64.to(DType::kFloat32));
      CHECK(max_diff(a.grad(), b.grad()) < 1e-5);
    }
  }
}

TEST_CASE("softmax: bad inputs name the problem") {
  REQUIRE_THROWS_WITH(ops::softmax(Tensor::zeros({2, 3}, DType::kInt64)),
                      Catch::Contains("softmax") && Catch::Contains("int64"));
  REQUIRE_THROWS_WITH(ops::softmax(Tensor::zeros({2, 3}, DType::kFloat32), 2),
                      Catch::Contains("softmax: axis 2 is out of range"));
  REQUIRE_THROWS_WITH(ops::log_softmax(Tensor::scalar(1.0)), Catch::Contains("log_softmax"));
}

}  // namespace
}  // namespace gpipe
