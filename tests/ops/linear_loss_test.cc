// ops::linear_cross_entropy (Note [Fused output loss] in ops/loss.cc)
// against the composed linear + cross_entropy: loss and gradients at float32
// and under bf16, in chunks of every kind, at every ISA level; that no
// [N, C] tensor is allocated; the upstream gradient; all rows ignored; errors.
#include <catch2/catch.hpp>
#include <cmath>
#include <optional>
#include <vector>

#include "core/allocator.h"
#include "core/autograd.h"
#include "core/cpu_isa.h"
#include "core/parallel.h"
#include "core/precision.h"
#include "ops/elementwise.h"
#include "ops/linalg.h"
#include "ops/loss.h"

namespace gpipe {
namespace {

struct Grads {
  double loss;
  Tensor gx, gw;
};

// Targets in [0, c) with every 7th row ignored (-100).
Tensor targets_for(int64_t n, int64_t c) {
  std::vector<int64_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[i] = i % 7 == 3 ? -100 : (i * 7919 + 11) % c;
  return Tensor::from_vector<int64_t>(t, {n});
}

// The loss (times `upstream` before backward) and the gradients of x and w.
Grads run(bool fused, const Tensor& x0, const Tensor& w0, const Tensor& t,
          const ops::CrossEntropyOptions& opt, int64_t chunk_rows = 0, double upstream = 1.0) {
  Tensor x = x0.detach().set_requires_grad(true), w = w0.detach().set_requires_grad(true);
  Tensor loss = fused ? ops::linear_cross_entropy(x, w, t, opt, chunk_rows)
                      : ops::cross_entropy(ops::linear(x, w), t, opt);
  ops::mul_scalar(loss, upstream).backward();
  return {loss.item(), x.grad(), w.grad()};
}

double max_abs(const Tensor& a) {
  double m = 0;
  for (float v : a.to_vector<float>()) m = std::max(m, std::abs(static_cast<double>(v)));
  return m;
}
double max_diff(const Tensor& a, const Tensor& b) {
  const auto va = a.to_vector<float>(), vb = b.to_vector<float>();
  REQUIRE(va.size() == vb.size());
  double m = 0;
  for (size_t i = 0; i < va.size(); ++i)
    m = std::max(m, std::abs(static_cast<double>(va[i]) - static_cast<double>(vb[i])));
  return m;
}

void check_close(const Grads& got, const Grads& want, double rel) {
  CHECK(std::abs(got.loss - want.loss) <= rel * std::max(1.0, std::abs(want.loss)));
  CHECK(max_diff(got.gx, want.gx) <= rel * max_abs(want.gx));
  CHECK(max_diff(got.gw, want.gw) <= rel * max_abs(want.gw));
}

TEST_CASE("linear_cross_entropy: float32 equals linear + cross_entropy at every chunk and level") {
  // 150 rows, d 48, C 300 or 1100: rows * C is far more than the saved
  // gradients, so the fused kernel runs; chunks of 1 row, 7 (a remainder),
  // all rows and the default. C 1100 is three of the CPU kernel's vocabulary
  // blocks, the last short (Note [Vocabulary blocks] in ops/cpu/loss.cc),
  // with targets in each.
  const int64_t c = GENERATE(int64_t{300}, int64_t{1100});
  const int64_t n = 150, d = 48;
  const Tensor x = Tensor::randn({3, n / 3, d}, 1, 1.0, DType::kFloat32);
  const Tensor w = Tensor::randn({c, d}, 2, 0.3, DType::kFloat32);
  const Tensor t3 =
      Tensor::from_vector<int64_t>(targets_for(n, c).to_vector<int64_t>(), {3, n / 3});
  for (const ops::CrossEntropyOptions opt :
       {ops::CrossEntropyOptions{}, ops::CrossEntropyOptions{.label_smoothing = 0.1}}) {
    const Grads want = run(false, x, w, t3, opt);
    for (int level = 0; level <= static_cast<int>(detected_cpu_isa()); ++level) {
      CpuIsaGuard guard(static_cast<CpuIsa>(level));
      for (int64_t chunk : {int64_t{1}, int64_t{7}, n, int64_t{0}}) {
        INFO(cpu_isa_name(cpu_isa())
             << ", chunk " << chunk << ", smoothing " << opt.label_smoothing);
        check_close(run(true, x, w, t3, opt, chunk), want, 2e-5);
      }
    }
  }
}

TEST_CASE("linear_cross_entropy: the same bits at 1, 2 and 3 intra-op threads") {
  // The CPU kernel deals each chunk's rows to its tasks, which run their own
  // products block by block (Note [Vocabulary blocks] in ops/cpu/loss.cc):
  // C 1100 is two full blocks and a short one, which the tasks reach at
  // different times; d 600 is two k-slices of the logits' product (the
  // second adds to C). Under bf16 the outputs are rounded to bfloat16, so a
  // last-bit difference in the float32 sums seldom shows: there the kernel's
  // whole 32-row panels per task (for AMX's short panels, which add C in
  // another order) hold by construction; this case passed without them.
  const int64_t n = 300, d = 600, c = 1100;
  const Tensor x = Tensor::randn({n, d}, 11, 1.0, DType::kFloat32);
  const Tensor w = Tensor::randn({c, d}, 12, 0.3, DType::kFloat32);
  const Tensor t = targets_for(n, c);
  for (const bool bf16 : {false, true}) {
    std::optional<PrecisionScope> precision;
    if (bf16) precision.emplace(Precision::kBFloat16);
    auto at = [&](int threads) {
      ThreadPool pool(threads);
      IntraOpScope scope(&pool);
      return run(true, x, w, t, {.label_smoothing = 0.1}, 128);
    };
    const Grads one = at(1);
    for (int threads : {2, 3}) {
      INFO((bf16 ? "bf16, " : "float32, ") << threads << " threads");
      const Grads got = at(threads);
      CHECK(got.loss == one.loss);
      CHECK(got.gx.to_vector<float>() == one.gx.to_vector<float>());
      CHECK(got.gw.to_vector<float>() == one.gw.to_vector<float>());
    }
  }
}

TEST_CASE("linear_cross_entropy: the upstream gradient scales both gradients") {
  const int64_t n = 64, d = 16, c = 100;
  const Tensor x = Tensor::randn({n, d}, 3, 1.0, DType::kFloat32);
  const Tensor w = Tensor::randn({c, d}, 4, 0.3, DType::kFloat32);
  const Tensor t = targets_for(n, c);
  check_close(run(true, x, w, t, {}, 10, 3.5), run(false, x, w, t, {}, 0, 3.5), 2e-5);
}

TEST_CASE("linear_cross_entropy: no [N, C] tensor is allocated in training") {
  const int64_t n = 512, d = 32, c = 2048;  // logits: 4 MB; the fused op's chunk: 64 rows
  const Tensor x = Tensor::randn({n, d}, 5, 1.0, DType::kFloat32);
  const Tensor w = Tensor::randn({c, d}, 6, 0.3, DType::kFloat32);
  const Tensor t = targets_for(n, c);
  auto peak_of = [&](bool fused) {
    Allocator& a = allocator_for(kCpu);
    a.reset_peak();
    const int64_t before = a.stats().live_total;
    run(fused, x, w, t, {}, 64);
    return a.stats().peak_total - before;
  };
  const int64_t logits_bytes = n * c * 4;
  const int64_t fused = peak_of(true), composed = peak_of(false);
  INFO("peak above the inputs: fused " << fused << " B, composed " << composed << " B");
  CHECK(composed >= 2 * logits_bytes);  // the logits and their gradient
  CHECK(fused < logits_bytes / 2);      // chunk (64 rows) + gradients of x and w
}

TEST_CASE("linear_cross_entropy: its block scratch is charged as workspace, then freed") {
  // A chunk's rows x one 512-column block (Note [Vocabulary blocks]), from the
  // allocator (the planner's profile measures a layer's workspace there),
  // beside the chunk's exponentials z (rows x C, also workspace).
  const int64_t n = 256, d = 32, c = 2048, chunk = 64;
  const Tensor x = Tensor::randn({n, d}, 5, 1.0, DType::kFloat32);
  const Tensor w = Tensor::randn({c, d}, 6, 0.3, DType::kFloat32);
  const Tensor t = targets_for(n, c);
  Allocator& a = allocator_for(kCpu);
  a.reset_peak();
  const int64_t before = a.stats().live_bytes(MemoryCategory::kWorkspace);
  run(true, x, w, t, {}, chunk);
  const MemoryStats after = a.stats();
  CHECK(after.peak_bytes(MemoryCategory::kWorkspace) - before >= chunk * (c + 512) * 4);
  CHECK(after.live_bytes(MemoryCategory::kWorkspace) == before);
}

TEST_CASE("linear_cross_entropy: under bf16 equals the 16-bit linear + cross_entropy") {
  // Under bf16 both multiply the bfloat16 roundings of x and w into float32
  // logits (a float32 x keeps a float32 product), and round the logits'
  // gradient to bfloat16 for the products: only the softmax's float32 order
  // differs, so the bfloat16 gx may differ in its last bit.
  const int64_t c = GENERATE(int64_t{200}, int64_t{1100});  // one vocabulary block, or three
  const int64_t n = 96, d = 40;
  const Tensor x = Tensor::randn({n, d}, 7, 1.0, DType::kFloat32);
  const Tensor w = Tensor::randn({c, d}, 8, 0.3, DType::kFloat32);
  const Tensor t = targets_for(n, c);
  PrecisionScope bf16(Precision::kBFloat16);
  const Grads want = run(false, x, w, t, {.label_smoothing = 0.05});
  for (int level = 0; level <= static_cast<int>(detected_cpu_isa()); ++level) {
    CpuIsaGuard guard(static_cast<CpuIsa>(level));
    for (int64_t chunk : {int64_t{5}, int64_t{0}}) {
      INFO(cpu_isa_name(cpu_isa()) << ", chunk " << chunk);
      const Grads got = run(true, x, w, t, {.label_smoothing = 0.05}, chunk);
      CHECK(got.gx.dtype() == DType::kFloat32);  // through the differentiable rounding of x
      CHECK(std::abs(got.loss - want.loss) <= 1e-5 * std::abs(want.loss));
      CHECK(max_diff(got.gx, want.gx) <= 1e-2 * max_abs(want.gx));
      CHECK(max_diff(got.gw, want.gw) <= 1e-2 * max_abs(want.gw));
    }
  }
  // A bfloat16 x (a takes_16bit layer's output) gives a bfloat16 gradient.
  Tensor xh = ops::cast(x, DType::kBFloat16).set_requires_grad(true);
  Tensor wl = w.detach().set_requires_grad(true);
  ops::linear_cross_entropy(xh, wl, t).backward();
  CHECK(xh.grad().dtype() == DType::kBFloat16);
  CHECK(wl.grad().dtype() == DType::kFloat32);
}

TEST_CASE("linear_cross_entropy: every row ignored gives 0 and zero gradients") {
  const Tensor x = Tensor::randn({40, 8}, 9, 1.0, DType::kFloat32);
  const Tensor w = Tensor::randn({50, 8}, 10, 1.0, DType::kFloat32);
  const Tensor t = Tensor::full({40}, -100.0, DType::kInt64);
  const Grads g = run(true, x, w, t, {.label_smoothing = 0.1}, 16);
  CHECK(g.loss == 0.0);
  CHECK(max_abs(g.gx) == 0.0);
  CHECK(max_abs(g.gw) == 0.0);
}

TEST_CASE("linear_cross_entropy: bad input names what was wrong") {
  const Tensor x = Tensor::randn({40, 8}, 11, 1.0, DType::kFloat32);
  const Tensor w = Tensor::randn({50, 8}, 12, 1.0, DType::kFloat32);
  const Tensor t = targets_for(40, 50);
  REQUIRE_THROWS_WITH(ops::linear_cross_entropy(x, Tensor::zeros({50, 9}), t),
                      Catch::Contains("does not match weight [50, 9]"));
  REQUIRE_THROWS_WITH(ops::linear_cross_entropy(x, w, targets_for(39, 50)),
                      Catch::Contains("expected targets of shape [40]"));
  REQUIRE_THROWS_WITH(ops::linear_cross_entropy(x, w, Tensor::zeros({40})),
                      Catch::Contains("int32 or int64 targets"));
  std::vector<int64_t> bad = t.to_vector<int64_t>();
  bad[17] = 50;
  REQUIRE_THROWS_WITH(
      ops::linear_cross_entropy(x, w, Tensor::from_vector<int64_t>(bad, {40})),
      Catch::Contains("target 50") && Catch::Contains("position 17") && Catch::Contains("C = 50"));
  REQUIRE_THROWS_WITH(ops::linear_cross_entropy(x, w, t, {.label_smoothing = -0.5}),
                      Catch::Contains("label_smoothing"));
  REQUIRE_THROWS_WITH(ops::linear_cross_entropy(x, w, t, {}, -1), Catch::Contains("chunk_rows"));
}

}  // namespace
}  // namespace gpipe
