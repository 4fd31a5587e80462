// embedding beyond the op table: index errors, float32 vs float64, and a
// scatter-add gradient that is bit-identical for any thread count.
#include "ops/embedding.h"

#include <catch2/catch.hpp>

#include "core/allocator.h"
#include "core/autograd.h"
#include "core/parallel.h"
#include "ops/elementwise.h"
#include "ops/shape.h"

namespace gpipe {
namespace {

TEST_CASE("embedding: an out-of-range index names the index, its position and V") {
  Tensor w = Tensor::randn({10, 4}, 1, 1.0, DType::kFloat32);
  Tensor idx = Tensor::from_vector<int64_t>({1, 2, 3, 4, 12, 5}, {2, 3});
  REQUIRE_THROWS_WITH(ops::embedding(w, idx), Catch::Contains("index 12") &&
                                                  Catch::Contains("position [1, 1]") &&
                                                  Catch::Contains("V = 10"));
  Tensor neg = Tensor::from_vector<int32_t>({0, -1}, {2});
  REQUIRE_THROWS_WITH(ops::embedding(w, neg),
                      Catch::Contains("index -1") && Catch::Contains("position [1]"));
}

TEST_CASE("embedding: bad weight or index types are rejected") {
  Tensor w = Tensor::zeros({10, 4});
  REQUIRE_THROWS_WITH(ops::embedding(w, Tensor::zeros({3})),
                      Catch::Contains("embedding") && Catch::Contains("int32 or int64"));
  REQUIRE_THROWS_WITH(ops::embedding(Tensor::zeros({10}), Tensor::from_vector<int64_t>({1}, {1})),
                      Catch::Contains("expected weight [V, D]"));
}

TEST_CASE("embedding: scalar index gives one row") {
  Tensor w = Tensor::randn({6, 3}, 2, 1.0, DType::kFloat64);
  Tensor y = ops::embedding(w, Tensor::from_vector<int64_t>({4}, Shape{}));
  REQUIRE(y.shape() == Shape{3});
  for (int64_t c = 0; c < 3; ++c) CHECK(y.at({c}) == w.at({4, c}));
}

TEST_CASE("embedding: float32 agrees with float64, forward and backward") {
  Tensor w64 = Tensor::randn({7, 5}, 3, 1.0, DType::kFloat64);
  Tensor idx = Tensor::from_vector<int64_t>({6, 0, 6, 2, 6, 1, 0, 3}, {2, 4});
  Tensor g = Tensor::randn({2, 4, 5}, 4, 1.0, DType::kFloat64);
  Tensor a = w64.clone().set_requires_grad(true);
  Tensor b = w64.to(DType::kFloat32).set_requires_grad(true);
  Tensor ya = ops::embedding(a, idx), yb = ops::embedding(b, idx);
  ya.backward(g);
  yb.backward(g.to(DType::kFloat32));
  const auto va = ya.to_vector<double>(), vb = yb.to_vector<double>();
  for (size_t i = 0; i < va.size(); ++i) CHECK(std::abs(va[i] - vb[i]) < 1e-6);
  const auto ga = a.grad().to_vector<double>(), gb = b.grad().to_vector<double>();
  for (size_t i = 0; i < ga.size(); ++i) CHECK(std::abs(ga[i] - gb[i]) < 1e-5);
  // Row 4 and 5 are never looked up: zero gradient.
  for (int64_t c = 0; c < 5; ++c) CHECK(a.grad().at({4, c}) == 0.0);
}

TEST_CASE("embedding: the gradient is bit-identical for any thread count") {
  const int64_t v = 50, d = 64, n = 4000;
  std::vector<int64_t> ids(n);
  for (int64_t k = 0; k < n; ++k) ids[k] = (k * 7919) % 13;  // heavy repeats of few rows
  Tensor idx = Tensor::from_vector<int64_t>(ids, {n});
  Tensor g = Tensor::randn({n, d}, 5, 1.0, DType::kFloat32);
  auto grad_with = [&](int threads) {
    ThreadPool pool(threads);
    IntraOpScope scope(&pool);
    Tensor w = Tensor::zeros({v, d}).set_requires_grad(true);
    ops::embedding(w, idx).backward(g);
    return w.grad().to_vector<float>();
  };
  const auto g1 = grad_with(1);
  CHECK(g1 == grad_with(3));
  CHECK(g1 == grad_with(8));
}

TEST_CASE("embedding: a parameter's gradient gets only the rows used, added in place") {
  const int64_t v = 200000, d = 8;  // a 6.4 MB table
  Tensor w = Tensor::randn({v, d}, 6, 1.0, DType::kFloat32).set_requires_grad(true);
  Tensor idx = Tensor::from_vector<int64_t>({3, 17, 3}, {3});
  Tensor g = Tensor::randn({3, d}, 7, 1.0, DType::kFloat32);
  ops::embedding(w, idx).backward(g);  // first use: grad() is created as zeros
  REQUIRE(w.grad().defined());
  const Tensor before = w.grad().clone();
  const void* storage = w.grad().storage()->data();

  Allocator& cpu = allocator_for(kCpu);
  const int64_t live = cpu.stats().live_total;
  cpu.reset_peak();
  ops::embedding(w, Tensor::from_vector<int64_t>({17, 5}, {2})).backward(ops::slice(g, 0, 0, 2));
  // No dense [V, D] gradient on the way: the step's peak stays far below the table.
  CHECK(cpu.stats().peak_total - live < v * d * 4 / 8);
  CHECK(w.grad().storage()->data() == storage);  // the same tensor, added into

  const auto b = before.to_vector<float>(), a = w.grad().to_vector<float>();
  const auto gv = g.to_vector<float>();
  for (int64_t r = 0; r < v; ++r)
    for (int64_t c = 0; c < d; ++c) {
      float want = b[r * d + c];
      if (r == 17) want += gv[0 * d + c];
      if (r == 5) want += gv[1 * d + c];
      if (a[r * d + c] != want) {
        INFO("row " << r << " column " << c);
        REQUIRE(a[r * d + c] == want);
      }
    }
  // And the first backward was the plain scatter: rows 3 (twice) and 17.
  for (int64_t c = 0; c < d; ++c) {
    CHECK(b[3 * d + c] == gv[0 * d + c] + gv[2 * d + c]);
    CHECK(b[17 * d + c] == gv[1 * d + c]);
    CHECK(b[4 * d + c] == 0.0f);
  }
}

TEST_CASE("embedding: a parameter whose grad() has another dtype is a clear error") {
  Tensor w = Tensor::randn({6, 3}, 10, 1.0, DType::kFloat32).set_requires_grad(true);
  w.set_grad(Tensor::zeros({6, 3}, DType::kFloat64));
  Tensor idx = Tensor::from_vector<int64_t>({1, 2}, {2});
  REQUIRE_THROWS_WITH(ops::embedding(w, idx).backward(Tensor::zeros({2, 3})),
                      Catch::Contains("grad() is float64") && Catch::Contains("float32"));
}

TEST_CASE("embedding: a computed table gets the dense gradient through its graph") {
  Tensor w = Tensor::randn({6, 3}, 8, 1.0, DType::kFloat64).set_requires_grad(true);
  Tensor idx = Tensor::from_vector<int64_t>({2, 2, 5}, {3});
  Tensor g = Tensor::randn({3, 3}, 9, 1.0, DType::kFloat64);
  ops::embedding(ops::add(w, w), idx).backward(g);  // d/dw of (w + w)[idx] = 2 * scatter(g)
  const auto gw = w.grad().to_vector<double>(), gv = g.to_vector<double>();
  for (int64_t c = 0; c < 3; ++c) {
    CHECK(gw[2 * 3 + c] == 2 * (gv[c] + gv[3 + c]));
    CHECK(gw[5 * 3 + c] == 2 * gv[6 + c]);
    CHECK(gw[0 * 3 + c] == 0.0);
  }
}

}  // namespace
}  // namespace gpipe
