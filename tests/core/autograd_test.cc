#include "core/autograd.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "core/cpu_isa.h"
#include "core/parallel.h"
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

TEST_CASE("autograd: a large tensor's gradients sum on the pool, exactly, in every dtype") {
  // Over kAccumulateGrain (autograd.cc) and not a multiple of it: the sum is
  // split over the pool's threads, and every element must still be g1 + g2.
  ThreadPool pool(2);
  IntraOpScope scope(&pool);
  const int64_t n = 100003;
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16}) {
    CAPTURE(dt);
    const Tensor w1 = Tensor::uniform(Shape{n}, 1, -1, 1).to(dt);
    const Tensor w2 = Tensor::uniform(Shape{n}, 2, -1, 1).to(dt);
    Tensor x = Tensor::zeros(Shape{n}, dt);
    x.set_requires_grad(true);
    ops::add(ops::sum(ops::mul(x, w1)), ops::sum(ops::mul(x, w2))).backward();
    const std::vector<double> g = x.grad().to(DType::kFloat64).to_vector<double>();
    const std::vector<double> a = w1.to(DType::kFloat64).to_vector<double>();
    const std::vector<double> b = w2.to(DType::kFloat64).to_vector<double>();
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; ++i) {
      // The sum in the tensor's own type (16-bit: in float32, rounded once).
      const double want =
          dt == DType::kFloat64
              ? a[i] + b[i]
              : Tensor::scalar(static_cast<float>(a[i]) + static_cast<float>(b[i]), DType::kFloat32)
                    .to(dt)
                    .to(DType::kFloat64)
                    .item();
      wrong += g[i] != want;
    }
    CHECK(wrong == 0);
  }
}

TEST_CASE("autograd: 16-bit gradient sums round as the scalar conversions, specials included") {
  // The sum is vectorised by the compiler (autograd.cc): every element must
  // have the bits of the scalar float32 sum rounded once, ties to even, NaN
  // quiet, float16 overflow to infinity and its subnormals kept.
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  std::vector<std::pair<float, float>> pairs = {
      {1.0f, 0.00390625f},        // bf16: exactly half an ulp of 1 (tie, to even: 1)
      {1.0078125f, 0.00390625f},  // bf16: a tie from an odd mantissa (up)
      {1.0f, 0.00048828125f},     // f16: half an ulp of 1
      {inf, -inf},
      {inf, 1.0f},
      {-inf, -2.0f},
      {nan, 1.0f},
      {-nan, 0.0f},
      {60000.0f, 60000.0f},  // past float16's largest: inf
      {3e38f, 3e38f},        // past bfloat16's largest: inf
      {6e-8f, 1e-8f},        // a float16 subnormal
      {1e-39f, 1e-40f},      // float32 denormals in bfloat16
      {-0.0f, 0.0f},
      {-0.0f, -0.0f},
      {0.1f, 0.2f},
      {-1.5f, 0.25f}};
  for (int i = 0; i < 70; ++i)  // past a vector's width, with a remainder
    pairs.emplace_back(static_cast<float>(i) * 0.37f - 9.0f, 1.0f / static_cast<float>(i + 3));
  // The ops library's kernel (registered when it is linked, as here), then
  // core's own loop.
  const CpuAccumulateIntoFn kernel = register_cpu_accumulate_into(nullptr);
  register_cpu_accumulate_into(kernel);
  REQUIRE(kernel != nullptr);
  std::vector<std::pair<CpuAccumulateIntoFn, CpuIsa>> runs;  // the kernel at every level
  for (CpuIsa isa : supported_cpu_isas()) runs.emplace_back(kernel, isa);
  runs.emplace_back(nullptr, cpu_isa());
  for (const auto& [fn, isa] : runs)
    for (DType dt : {DType::kBFloat16, DType::kFloat16}) {
      CAPTURE(dt, fn == kernel, cpu_isa_name(isa));
      const CpuIsaGuard guard(isa);
      register_cpu_accumulate_into(fn);
      const bool bf = dt == DType::kBFloat16;
      const auto to16 = [&](float f) { return bf ? float_to_bf16_bits(f) : float_to_f16_bits(f); };
      const auto from16 = [&](uint16_t b) {
        return bf ? bf16_bits_to_float(b) : f16_bits_to_float(b);
      };
      const int64_t n = static_cast<int64_t>(pairs.size());
      std::vector<float> a, b;
      for (const auto& [x, y] : pairs) {
        a.push_back(x);
        b.push_back(y);
      }
      // Inputs rounded to the type first: the gradients are those values.
      const Tensor w1 = Tensor::from_vector<float>(a, Shape{n}).to(dt);
      const Tensor w2 = Tensor::from_vector<float>(b, Shape{n}).to(dt);
      Tensor x = Tensor::zeros(Shape{n}, dt);
      x.set_requires_grad(true);
      ops::add(ops::sum(ops::mul(x, w1)), ops::sum(ops::mul(x, w2))).backward();
      const auto* g = static_cast<const uint16_t*>(x.grad().raw_data());
      const auto* p1 = static_cast<const uint16_t*>(w1.raw_data());
      const auto* p2 = static_cast<const uint16_t*>(w2.raw_data());
      for (int64_t i = 0; i < n; ++i) {
        CAPTURE(i, a[i], b[i]);
        CHECK(g[i] == to16(from16(p1[i]) + from16(p2[i])));
      }
    }
  register_cpu_accumulate_into(kernel);
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

TEST_CASE("autograd: rematerialise gives the same gradients and frees internals") {
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
  Tensor out = rematerialise(body, {x})[0];
  CHECK(out.grad_fn()->name() == "Remat");
  ops::sum(out).backward();
  CHECK(w.grad().to_vector<double>() == gw);
  CHECK(x.grad().to_vector<double>() == gx);
}

TEST_CASE("autograd: rematerialise reaches parameters when the input needs no grad") {
  Tensor w = leaf({1, 2}, Shape{2});
  Tensor x = Tensor::from_vector<double>({3, 4}, Shape{2});
  Tensor out = rematerialise(
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

namespace {
Tensor param(const Shape& s, uint64_t seed) {
  Tensor t = Tensor::randn(s, seed);
  t.set_requires_grad(true);
  return t;
}

// A small block: embedding-free MLP with a layer norm, a weight used twice
// (directly and through a transpose), and a scalar parameter on the input path.
struct Block {
  Tensor w1 = param({16, 8}, 1), b1 = param({16}, 2), w2 = param({8, 16}, 3), b2 = param({8}, 4);
  Tensor gamma = param({8}, 5), beta = param({8}, 6), scale = param({1}, 7);
  std::vector<Tensor> params() const { return {w1, b1, w2, b2, gamma, beta, scale}; }
  Tensor forward(const Tensor& x) const {
    Tensor h = ops::linear(x, w1, b1, ops::FusedActivation::kGelu);
    h = ops::linear(h, w2, b2);
    h = ops::layer_norm(ops::mul(h, scale), gamma, beta);
    // w1 again, transposed: the tied use reaches the weight through a view.
    return ops::matmul(h, ops::transpose(w1, 0, 1));
  }
  void zero() const {
    for (Tensor p : params()) p.zero_grad();
  }
};

std::vector<std::vector<float>> grads_of(const std::vector<Tensor>& ts) {
  std::vector<std::vector<float>> out;
  for (const Tensor& t : ts)
    out.push_back(t.grad().defined() ? t.grad().to_vector<float>() : std::vector<float>{});
  return out;
}
}  // namespace

TEST_CASE("autograd: split backward (input, then weights) equals the full backward exactly") {
  Block blk;
  Tensor x0 = Tensor::randn({6, 8}, 10);
  Tensor g0 = Tensor::randn({6, 16}, 11);
  Tensor x1 = Tensor::randn({6, 8}, 12);
  Tensor g1 = Tensor::randn({6, 16}, 13);
  auto input = [](const Tensor& x) {
    Tensor l = x.clone();
    l.set_requires_grad(true);
    return l;
  };
  // Reference: two micro-batches' full backwards, accumulating.
  Tensor a0 = input(x0), a1 = input(x1);
  backward({blk.forward(a0)}, {g0});
  backward({blk.forward(a1)}, {g1});
  const auto want = grads_of(blk.params());
  const auto want_x0 = a0.grad().to_vector<float>(), want_x1 = a1.grad().to_vector<float>();

  SECTION("I0 W0 I1 W1 and I0 I1 W0 W1 both match") {
    for (bool interleave : {true, false}) {
      INFO((interleave ? "I0 W0 I1 W1" : "I0 I1 W0 W1"));
      blk.zero();
      Tensor c0 = input(x0), c1 = input(x1);
      const int64_t before = live_node_count();
      WeightGradients w0 = backward_input({blk.forward(c0)}, {g0}, {c0});
      // The input's gradient is complete; no parameter has one yet.
      CHECK(c0.grad().to_vector<float>() == want_x0);
      for (const Tensor& p : blk.params()) CHECK_FALSE(p.grad().defined());
      // The three products (the GELU linear's matmul, the bias-only linear,
      // one fused node on the CPU: Note [Fused linear] in ops/linalg.cc, and
      // the tied one) defer their weight gradients' arithmetic; the GELU's
      // bias_activation, layer_norm and mul (the scale) compute their cheap
      // parameter gradients now and hand them over.
      CHECK(w0.deferred_ops() == 3);
      CHECK(w0.pending() == 6);
      CHECK(live_node_count() > before);  // the deferred nodes keep what W needs
      WeightGradients w1;
      if (!interleave) w1 = backward_input({blk.forward(c1)}, {g1}, {c1});
      w0.run();
      if (interleave) w1 = backward_input({blk.forward(c1)}, {g1}, {c1});
      w1.run();
      CHECK(live_node_count() == before);  // W released every node
      CHECK(c1.grad().to_vector<float>() == want_x1);
      CHECK(grads_of(blk.params()) == want);
    }
  }
  SECTION("with no input leaf everything is deferred") {
    blk.zero();
    WeightGradients w = backward_input({blk.forward(x0)}, {g0}, {});
    for (const Tensor& p : blk.params()) CHECK_FALSE(p.grad().defined());
    w.run();
    backward({blk.forward(x1)}, {g1});
    CHECK(grads_of(blk.params()) == want);
  }
  SECTION(
      "dropping the weight gradients frees the graph; run() twice and non-leaf inputs are errors") {
    blk.zero();
    Tensor c0 = input(x0);
    const int64_t before = live_node_count();
    {
      WeightGradients w = backward_input({blk.forward(c0)}, {g0}, {c0});
      CHECK(live_node_count() > before);
    }
    CHECK(live_node_count() == before);
    for (const Tensor& p : blk.params()) CHECK_FALSE(p.grad().defined());
    WeightGradients w = backward_input({blk.forward(c0)}, {g0}, {c0});
    w.run();
    CHECK_THROWS_WITH(w.run(), Contains("ran already"));
    Tensor h = ops::mul_scalar(input(x0), 2.0);
    CHECK_THROWS_WITH(backward_input({blk.forward(h)}, {g0}, {h}), Contains("is not a leaf"));
  }
}

TEST_CASE("autograd: split backward defers an embedding's rows and keeps tied uses exact") {
  Tensor table = param({10, 4}, 21);
  Tensor ids = Tensor::from_vector<int64_t>({1, 3, 3, 7, 0, 1}, Shape{6});
  Tensor g = Tensor::randn({6, 10}, 22);
  auto f = [&] {
    // Tied: the table embeds and (transposed) projects back, as a Transformer's softmax.
    Tensor e = ops::embedding(table, ids);
    return ops::matmul(ops::layer_norm(e, Tensor(), Tensor()), table, false, true);
  };
  backward({f()}, {g});
  backward({f()}, {g});
  const auto want = table.grad().to_vector<float>();
  table.zero_grad();
  WeightGradients w0 = backward_input({f()}, {g}, {});
  WeightGradients w1 = backward_input({f()}, {g}, {});
  CHECK_FALSE(table.grad().defined());
  w0.run();
  w1.run();
  CHECK(table.grad().to_vector<float>() == want);
}

// Note [Gradients in place] in core/autograd_engine.h: a gradient is taken
// over or summed in place only where no other tensor can see it.
TEST_CASE("autograd: gradients taken over in place stay private to each tensor") {
  // add hands its upstream gradient to both inputs: neither may adopt a
  // buffer the other also holds, or the next backward adds into both.
  Tensor a = leaf({1, 2}, Shape{2}), b = leaf({3, 4}, Shape{2});
  ops::sum(ops::add(a, b)).backward();
  CHECK_FALSE(a.grad().shares_storage_with(b.grad()));
  ops::sum(ops::add(a, b)).backward();
  CHECK(a.grad().to_vector<double>() == std::vector<double>{2, 2});
  CHECK(b.grad().to_vector<double>() == std::vector<double>{2, 2});

  // A non-leaf used three times (a residual stream): its gradients are summed
  // into one buffer. z = sum(h*h + h) with h = 2x: dz/dx = 2 (2h + 1) = 8x + 2.
  Tensor x = leaf({1, 2, 3}, Shape{3});
  Tensor h = ops::mul_scalar(x, 2);
  ops::sum(ops::add(ops::mul(h, h), h)).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{10, 18, 26});

  // A gradient that reaches a leaf through a view of a larger buffer is copied:
  // the leaf's grad() is its own tensor of its own size.
  Tensor w = leaf({1, 2, 3, 4}, Shape{4});
  Tensor g = ops::reshape(ops::mul_scalar(w, 5), {2, 2});
  ops::sum(g).backward();
  CHECK(w.grad().shape() == Shape{4});
  CHECK(w.grad().to_vector<double>() == std::vector<double>{5, 5, 5, 5});
}

TEST_CASE("autograd: an adopted gradient is charged to the gradient category") {
  const Device dev("cpu:51");  // its own device: the statistics start from zero
  Allocator& al = allocator_for(dev);
  Tensor w;
  {
    MemoryCategoryGuard cat(MemoryCategory::kParameter);
    w = Tensor::full(Shape{256}, 1.0, DType::kFloat32, dev);
  }
  w.set_requires_grad(true);
  Tensor loss = ops::sum(ops::mul_scalar(w, 3));
  const int64_t before = al.stats().allocations;
  loss.backward();
  loss = Tensor();
  const MemoryStats s = al.stats();
  // The seed, sum's and mul_scalar's gradients; mul_scalar's becomes w.grad()
  // itself: no fourth block for a copy.
  CHECK(s.allocations - before == 3);
  CHECK(w.grad().to_vector<double>() == std::vector<double>(256, 3.0));
  CHECK(s.live_bytes(MemoryCategory::kGradient) == 1024);
  CHECK(s.live_bytes(MemoryCategory::kParameter) == 1024);
  CHECK(s.live_bytes(MemoryCategory::kActivation) == 0);
  CHECK(s.live_total == 2048);
  w.zero_grad();
  CHECK(al.stats().live_bytes(MemoryCategory::kGradient) == 0);
}
