// cross_entropy beyond the op table: error messages, all-ignored batches,
// float32 vs float64, and the fused op against the composed log_softmax.
#include "ops/loss.h"

#include <catch2/catch.hpp>
#include <cmath>

#include "core/autograd.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"
#include "ops/softmax.h"

namespace gpipe {
namespace {

TEST_CASE("cross_entropy: a target out of range names the target and C") {
  Tensor logits = Tensor::randn({3, 5}, 1, 1.0, DType::kFloat32);
  REQUIRE_THROWS_WITH(
      ops::cross_entropy(logits, Tensor::from_vector<int64_t>({0, 5, 1}, {3})),
      Catch::Contains("target 5") && Catch::Contains("position 1") && Catch::Contains("C = 5"));
  REQUIRE_THROWS_WITH(ops::cross_entropy(logits, Tensor::from_vector<int32_t>({-1, 0, 1}, {3})),
                      Catch::Contains("target -1") && Catch::Contains("C = 5"));
  // -100 is fine (ignored), but with another ignore_index it is a bad target.
  CHECK_NOTHROW(ops::cross_entropy(logits, Tensor::from_vector<int64_t>({-100, 0, 1}, {3})));
  REQUIRE_THROWS_WITH(ops::cross_entropy(logits, Tensor::from_vector<int64_t>({-100, 0, 1}, {3}),
                                         {.ignore_index = 4}),
                      Catch::Contains("target -100"));
}

TEST_CASE("cross_entropy: bad shapes, dtypes and options are rejected") {
  Tensor logits = Tensor::zeros({3, 5});
  REQUIRE_THROWS_WITH(ops::cross_entropy(logits, Tensor::from_vector<int64_t>({0, 1}, {2})),
                      Catch::Contains("expected targets of shape [3]"));
  REQUIRE_THROWS_WITH(ops::cross_entropy(logits, Tensor::zeros({3})),
                      Catch::Contains("int32 or int64 targets"));
  REQUIRE_THROWS_WITH(ops::cross_entropy(logits, Tensor::from_vector<int64_t>({0, 1, 2}, {3}),
                                         {.label_smoothing = 1.5}),
                      Catch::Contains("label_smoothing"));
}

TEST_CASE("cross_entropy: all targets ignored gives 0 loss and finite zero gradients") {
  Tensor logits = Tensor::randn({4, 3}, 2, 1.0, DType::kFloat32).set_requires_grad(true);
  Tensor t = Tensor::from_vector<int64_t>({-100, -100, -100, -100}, {4});
  Tensor loss = ops::cross_entropy(logits, t, {.label_smoothing = 0.1});
  CHECK(loss.item() == 0.0);
  loss.backward();
  for (float g : logits.grad().to_vector<float>()) CHECK(g == 0.0f);
}

TEST_CASE("cross_entropy: huge logits stay finite") {
  Tensor logits = Tensor::from_vector<float>({1000.f, -1000.f, 0.f, 500.f}, {2, 2});
  Tensor loss = ops::cross_entropy(logits, Tensor::from_vector<int64_t>({1, 0}, {2}));
  CHECK(std::isfinite(loss.item()));
  CHECK(std::abs(loss.item() - (2000.0 + 500.0) / 2) < 1e-2);
}

TEST_CASE("cross_entropy: float32 agrees with float64") {
  Tensor x64 = Tensor::randn({6, 7}, 3, 2.0, DType::kFloat64);
  Tensor t = Tensor::from_vector<int64_t>({0, 6, 3, -100, 2, 2}, {6});
  const ops::CrossEntropyOptions opt{.label_smoothing = 0.1};
  Tensor a = x64.clone().set_requires_grad(true);
  Tensor b = x64.to(DType::kFloat32).set_requires_grad(true);
  Tensor la = ops::cross_entropy(a, t, opt), lb = ops::cross_entropy(b, t, opt);
  CHECK(lb.dtype() == DType::kFloat32);
  CHECK(std::abs(la.item() - lb.item()) < 1e-5);
  la.backward();
  lb.backward();
  const auto ga = a.grad().to_vector<double>(), gb = b.grad().to_vector<double>();
  for (size_t i = 0; i < ga.size(); ++i) CHECK(std::abs(ga[i] - gb[i]) < 1e-6);
}

TEST_CASE("cross_entropy: the fused op equals the composed log_softmax version") {
  const int64_t n = 5, c = 4;
  const double eps = 0.2;
  Tensor x = Tensor::randn({n, c}, 4, 1.5, DType::kFloat64);
  const std::vector<int64_t> targets = {3, 0, -100, 1, 3};
  // Smoothed one-hot weights; ignored rows are all zero.
  std::vector<double> w(n * c, 0.0);
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (targets[i] < 0) continue;
    ++count;
    for (int64_t j = 0; j < c; ++j) w[i * c + j] = eps / c + (j == targets[i] ? 1 - eps : 0.0);
  }
  Tensor wt = Tensor::from_vector<double>(w, {n, c});

  Tensor a = x.clone().set_requires_grad(true);
  Tensor fused =
      ops::cross_entropy(a, Tensor::from_vector<int64_t>(targets, {n}), {.label_smoothing = eps});
  Tensor b = x.clone().set_requires_grad(true);
  Tensor composed = ops::mul_scalar(ops::sum(ops::mul(ops::log_softmax(b), wt)), -1.0 / count);
  CHECK(std::abs(fused.item() - composed.item()) < 1e-12);
  fused.backward();
  composed.backward();
  const auto ga = a.grad().to_vector<double>(), gb = b.grad().to_vector<double>();
  for (size_t i = 0; i < ga.size(); ++i) CHECK(std::abs(ga[i] - gb[i]) < 1e-12);
}

}  // namespace
}  // namespace gpipe
