// Masks beyond the op table: the mask builders, -inf fill followed by softmax,
// zero gradients where filled, and error messages.
#include "ops/mask.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "ops/softmax.h"

namespace gpipe {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

TEST_CASE("causal_mask: 1 where the key is after the query") {
  Tensor m = ops::causal_mask(3, 4);
  REQUIRE(m.shape() == Shape{3, 4});
  CHECK(m.dtype() == DType::kFloat32);
  CHECK(m.to_vector<float>() == std::vector<float>{0, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 1});
  CHECK(ops::causal_mask(2, 2, DType::kInt64).to_vector<int64_t>() ==
        std::vector<int64_t>{0, 1, 0, 0});
  REQUIRE_THROWS_WITH(ops::causal_mask(-1, 2), Catch::Contains("t_q = -1"));
}

TEST_CASE("padding_mask: 1 at key positions past each length") {
  Tensor m = ops::padding_mask(Tensor::from_vector<int32_t>({1, 3, 0}, {3}), 3);
  REQUIRE(m.shape() == Shape{3, 1, 1, 3});
  CHECK(m.to_vector<float>() == std::vector<float>{0, 1, 1, 0, 0, 0, 1, 1, 1});
  REQUIRE_THROWS_WITH(ops::padding_mask(Tensor::from_vector<int64_t>({2, 5}, {2}), 4),
                      Catch::Contains("lengths[1] = 5"));
  REQUIRE_THROWS_WITH(ops::padding_mask(Tensor::zeros({2}), 4), Catch::Contains("int32/int64"));
}

TEST_CASE("masked_fill with -inf then softmax: masked keys get 0, rows sum to 1") {
  // scores [B=2, H=2, T=3, T=3], causal + padding (second sequence has length 2).
  Tensor scores = Tensor::randn({2, 2, 3, 3}, 1, 1.0, DType::kFloat64).set_requires_grad(true);
  Tensor s = ops::masked_fill(scores, ops::causal_mask(3, 3), -kInf);
  s = ops::masked_fill(s, ops::padding_mask(Tensor::from_vector<int64_t>({3, 2}, {2}), 3), -kInf);
  Tensor p = ops::softmax(s);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 3; ++i) {
        double row = 0;
        for (int64_t j = 0; j < 3; ++j) {
          const double v = p.at({b, h, i, j});
          const bool masked = j > i || (b == 1 && j >= 2);
          if (masked) CHECK(v == 0.0);
          row += v;
        }
        CHECK(std::abs(row - 1.0) < 1e-12);
      }
  p.backward(Tensor::randn({2, 2, 3, 3}, 2, 1.0, DType::kFloat64));
  const Tensor g = scores.grad();
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 3; ++j) {
          const double v = g.at({b, h, i, j});
          CHECK(std::isfinite(v));
          if (j > i || (b == 1 && j >= 2)) CHECK(v == 0.0);
        }
}

TEST_CASE("masked_fill: float32 agrees with float64 and the mask is not enlarged") {
  Tensor x = Tensor::randn({4, 5}, 3, 1.0, DType::kFloat64);
  Tensor mask = Tensor::from_vector<int64_t>({1, 0, 0, 1, 0}, {5});
  const auto a = ops::masked_fill(x, mask, -2.5).to_vector<double>();
  const auto b = ops::masked_fill(x.to(DType::kFloat32), mask, -2.5).to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) CHECK(std::abs(a[i] - b[i]) < 1e-6);
  REQUIRE_THROWS_WITH(ops::masked_fill(Tensor::zeros({5}), Tensor::zeros({4, 5}), 0.0),
                      Catch::Contains("masked_fill: mask of shape [4, 5] does not broadcast"));
  REQUIRE_THROWS_WITH(ops::masked_fill(Tensor::zeros({4, 5}), Tensor::zeros({3}), 0.0),
                      Catch::Contains("does not broadcast to the input's shape [4, 5]"));
}

}  // namespace
}  // namespace gpipe
