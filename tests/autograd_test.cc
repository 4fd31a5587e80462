#include "core/autograd.h"

#include <catch2/catch.hpp>

#include "core/rng.h"
#include "ops/ops.h"

using namespace gpipe;
using Catch::Contains;

namespace {
Tensor leaf(std::vector<double> v, Shape s) {
  Tensor t = Tensor::from_vector<double>(v, s);
  t.set_requires_grad(true);
  return t;
}
}  // namespace

TEST_CASE("autograd: shared subexpressions sum their gradients") {
  Tensor x = leaf({1, 2, 3}, Shape{3});
  Tensor y = ops::mul(x, x);            // dy/dx = 2x
  Tensor z = ops::sum(ops::add(y, y));  // dz/dx = 4x
  z.backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{4, 8, 12});
}

TEST_CASE("autograd: several roots in one backward") {
  Tensor x = leaf({1, 2}, Shape{2});
  Tensor a = ops::sum(ops::mul_scalar(x, 3));
  Tensor b = ops::sum(ops::mul(x, x));
  backward({a, b}, {Tensor::scalar(1, DType::kFloat64), Tensor::scalar(0.5, DType::kFloat64)});
  CHECK(x.grad().to_vector<double>() == std::vector<double>{3 + 1, 3 + 2});
}

TEST_CASE("autograd: gradients accumulate across backward calls until zeroed") {
  Tensor x = leaf({1, 2}, Shape{2});
  ops::sum(x).backward();
  ops::sum(ops::mul_scalar(x, 2)).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{3, 3});
  x.zero_grad();
  CHECK_FALSE(x.grad().defined());
}

TEST_CASE("autograd: no-grad mode records nothing") {
  Tensor x = leaf({1, 2}, Shape{2});
  Tensor y;
  {
    NoGradGuard guard;
    y = ops::mul(x, x);
  }
  CHECK_FALSE(y.requires_grad());
  CHECK(y.grad_fn() == nullptr);
  CHECK_THROWS_WITH(y.backward(Tensor::full(Shape{2}, 1, DType::kFloat64)),
                    Contains("does not require grad"));
}

TEST_CASE("autograd: unused outputs and integer inputs are fine") {
  Tensor x = leaf({1, 2, 3, 4}, Shape{4});
  auto parts = ops::split(x, {1, 3}, 0);
  ops::sum(parts[1]).backward();  // parts[0] unused
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 1, 1, 1});
}

TEST_CASE("autograd: graph memory is released once backward consumed it") {
  const Device dev("cpu:50");
  Allocator& alloc = allocator_for(dev);
  Tensor w;
  {
    MemoryCategoryGuard params(MemoryCategory::kParameter);
    w = Tensor::randn(Shape{64, 64}, 1, 1.0, DType::kFloat64).to(dev).detach();
  }
  w.set_requires_grad(true);
  const int64_t nodes_before = live_node_count();
  Tensor loss;
  {
    Tensor h = w;
    for (int i = 0; i < 5; ++i) h = ops::tanh(ops::matmul(h, w));
    loss = ops::sum(h);
  }
  const int64_t live_with_graph = alloc.stats().live_bytes(MemoryCategory::kActivation);
  // Each tanh keeps its output for backward (the next matmul saves the same
  // tensor); matmul outputs are not needed and already gone.
  CHECK(live_with_graph == 5 * 64 * 64 * 8 + 8);
  loss.backward();
  // Only the loss itself (8 bytes) remains charged to activations on this device.
  CHECK(alloc.stats().live_bytes(MemoryCategory::kActivation) == 8);
  CHECK_THROWS_WITH(loss.backward(), Contains("second time"));
  loss = Tensor();
  CHECK(live_node_count() == nodes_before);
}

TEST_CASE("autograd: retain_graph allows a second backward") {
  Tensor x = leaf({2}, Shape{1});
  Tensor y = ops::sum(ops::mul(x, x));
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  CHECK(x.grad().item() == 8);
}

TEST_CASE("autograd: re-running a forward from a saved input (recomputation)") {
  // The pipeline's pattern: keep only a stage's input, rebuild its graph later.
  Tensor w = leaf({0.5, -1.0, 2.0, 0.25}, Shape{2, 2});
  Tensor x = Tensor::from_vector<double>({1, 2, 3, 4}, Shape{2, 2});
  auto stage = [&](const Tensor& in) {
    Tensor h = ops::dropout(ops::tanh(ops::matmul(in, w)), 0.5, /*training=*/true);
    return ops::sum(ops::mul(h, h));
  };
  RngScope rng(RngContext{.seed = 3, .step = 1, .micro_batch = 0, .layer = 7});

  // Reference: ordinary backward.
  Tensor x_leaf = x.clone();
  x_leaf.set_requires_grad(true);
  stage(x_leaf).backward();
  const auto gw_ref = w.grad().to_vector<double>(), gx_ref = x_leaf.grad().to_vector<double>();
  w.zero_grad();

  // Forward without a graph, then recompute from the saved input with grad.
  Tensor saved;
  double loss_first;
  {
    NoGradGuard no_grad;
    saved = x.clone();
    loss_first = stage(saved).item();
  }
  Tensor again = saved.detach();
  again.set_requires_grad(true);
  Tensor loss = stage(again);
  CHECK(loss.item() == loss_first);
  loss.backward();
  CHECK(w.grad().to_vector<double>() == gw_ref);
  CHECK(again.grad().to_vector<double>() == gx_ref);
}

TEST_CASE("autograd: checkpoint gives the same gradients and frees internals") {
  Tensor w = leaf({0.5, -1.0, 2.0, 0.25}, Shape{2, 2});
  Tensor x = leaf({1, 2, 3, 4}, Shape{2, 2});
  RngScope rng(RngContext{.seed = 9});
  auto body = [&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{ops::dropout(ops::gelu(ops::matmul(in[0], w)), 0.3, true)};
  };
  ops::sum(body({x})[0]).backward();
  const auto gw = w.grad().to_vector<double>(), gx = x.grad().to_vector<double>();
  w.zero_grad();
  x.zero_grad();
  Tensor out = checkpoint(body, {x})[0];
  CHECK(out.grad_fn()->name() == "Checkpoint");
  ops::sum(out).backward();
  CHECK(w.grad().to_vector<double>() == gw);
  CHECK(x.grad().to_vector<double>() == gx);
}

TEST_CASE("autograd: checkpoint reaches parameters when the input needs no grad") {
  Tensor w = leaf({1, 2}, Shape{2});
  Tensor x = Tensor::from_vector<double>({3, 4}, Shape{2});
  Tensor out = checkpoint(
      [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::mul(in[0], w)}; },
      {x})[0];
  ops::sum(out).backward();
  CHECK(w.grad().to_vector<double>() == std::vector<double>{3, 4});
}

TEST_CASE("autograd: bad backward calls give readable errors") {
  Tensor x = leaf({1, 2}, Shape{2});
  Tensor y = ops::mul(x, x);
  CHECK_THROWS_WITH(y.backward(), Contains("pass its gradient explicitly"));
  CHECK_THROWS_WITH(y.backward(Tensor::zeros(Shape{3}, DType::kFloat64)),
                    Contains("has shape [3], its root has shape [2]"));
  CHECK_THROWS_WITH(ops::mul(x, Tensor::zeros(Shape{2})),
                    Contains("dtype float32 but input 0 has float64"));
}

TEST_CASE("autograd: a root gradient of another dtype is an error, not a misread buffer") {
  Tensor x = Tensor::randn(Shape{4096}, 3, 1.0, DType::kFloat32).set_requires_grad(true);
  CHECK_THROWS_WITH(ops::relu(x).backward(Tensor::full(Shape{4096}, 1.0, DType::kFloat64)),
                    Contains("different dtypes"));
}

TEST_CASE("autograd: ops on tensors of rank above 8 work forward and backward") {
  const Shape s{1, 2, 1, 2, 1, 2, 1, 2, 3};  // rank 9
  Tensor x = Tensor::randn(s, 4, 1.0, DType::kFloat64).set_requires_grad(true);
  Tensor y = ops::sum(ops::mul(ops::relu(x), x));
  y.backward();
  const auto xv = x.to_vector<double>(), gv = x.grad().to_vector<double>();
  for (size_t i = 0; i < xv.size(); ++i) CHECK(gv[i] == (xv[i] > 0 ? 2 * xv[i] : 0.0));
}
