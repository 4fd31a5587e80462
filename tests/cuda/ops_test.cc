// Every CUDA kernel against the CPU reference (skipped without a GPU, see
// gpu_test_main.cc), in the style of llm.c's dev/cuda: same inputs, both
// devices, compare.
//
// 1. The op table (tests/ops/*_cases.cc): each case's fn runs on CPU
//    tensors and on cuda:0 copies of the same inputs, in float64, float32,
//    bfloat16 and float16; outputs and the gradients of sum(out * R) (R
//    fixed random, in each output's dtype) must agree.
// 2. Larger shapes that reach the multi-block / multi-chunk paths the tiny
//    op-table shapes do not (long rows, many chunks, block-per-row softmax
//    and LayerNorm, big embeddings, realistic convolutions).
// 3. Bit-level properties: dropout masks equal the CPU's exactly; LayerNorm
//    parameter gradients and embedding gradients are identical from run to
//    run; bad indices / targets throw the CPU's exact message.
//
// Tolerances, on max |gpu - cpu| / max(1, |cpu|) over all elements:
//   float64: 1e-9 (different summation orders only);
//   float32: 2e-4 for the op table, 1e-3 for the larger shapes (reductions
//   of up to ~1e6 terms in a different order; TF32 is off);
//   bfloat16 / float16: twice the op case's tolerance16 (4 unit roundoffs,
//   2^-8 / 2^-11, by default), as each side may be that far from the exact
//   result; the mixed-precision layer norm and cross-entropy: 8 * 2^-8.
#include "ops/ops.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/precision.h"
#include "core/rng.h"
#include "ops/conv_kernels.h"
#include "ops/cuda/conv_direct.h"
#include "ops/dispatch.h"
#include "tests/cuda/compare.h"
#include "tests/ops/op_table.h"

using Catch::Matchers::Contains;

namespace gpipe::testing {
namespace {

// --- 1. the op table ---

TEST_CASE(
    "cuda ops: every op-table case matches the CPU on cuda:0 (float64, float32, bfloat16, "
    "float16)") {
  REQUIRE_FALSE(op_cases().empty());
  for (const OpCase& c : op_cases()) {
    for (DType dtype : {DType::kFloat64, DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
      if (is_half(dtype) && !c.check_16bit) continue;
      SECTION(c.name + " / " + std::string(dtype_name(dtype))) {
        // 16-bit: each side within tolerance16 unit roundoffs (2^-8, 2^-11)
        // of the exact result on the same rounded inputs (tests/ops/op_table.h).
        const double tol = dtype == DType::kFloat64    ? 1e-9
                           : dtype == DType::kFloat32  ? 2e-4
                           : dtype == DType::kBFloat16 ? 2 * c.tolerance16 * std::ldexp(1.0, -8)
                                                       : 2 * c.tolerance16 * std::ldexp(1.0, -11);
        compare(c.name, c.fn, c.make_inputs(), dtype, tol, c.check_grad, c.grad_inputs);
      }
    }
  }
}

TEST_CASE("cuda ops: every CUDA kernel is exercised by some op-table case") {
  std::set<std::string> covered;
  for (const OpCase& c : op_cases()) covered.insert(c.covers.begin(), c.covers.end());
  for (const std::string& k : ops::registered_kernels(DeviceType::kCUDA)) {
    INFO("CUDA kernel '" << k << "' is not listed in any op-table case's `covers`");
    CHECK(covered.count(k) == 1);
  }
}

// --- 2. larger shapes ---

Tensor r64(const Shape& s, uint64_t seed, double lo = -1, double hi = 1) {
  return rand64(s, seed, lo, hi);
}

Tensor indices(const Shape& s, int64_t v, uint64_t seed, DType dtype = DType::kInt64) {
  const auto u = r64(s, seed, 0, 1).to_vector<double>();
  std::vector<int64_t> idx(u.size());
  for (size_t i = 0; i < u.size(); ++i) idx[i] = static_cast<int64_t>(u[i] * v) % v;
  return Tensor::from_vector(idx, s).to(dtype);
}

void both(const std::string& name, const Fn& fn, const In& in, bool grads = true,
          std::vector<int> which = {}) {
  for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
    SECTION(name + " / " + std::string(dtype_name(dtype))) {
      compare(name, fn, in, dtype, dtype == DType::kFloat64 ? 1e-9 : 1e-3, grads, which);
    }
  }
}

TEST_CASE("cuda ops: reductions over long rows, many rows and strided columns") {
  both("sum/all 1e6+3", [](const In& in) { return In{ops::sum(in[0])}; }, {r64(Shape{1000003}, 1)});
  both("sum/axis0 [3000,5]", [](const In& in) { return In{ops::sum(in[0], {0})}; },
       {r64(Shape{3000, 5}, 2)});
  both("sum/axis1 [7,5000,3]", [](const In& in) { return In{ops::sum(in[0], {1})}; },
       {r64(Shape{7, 5000, 3}, 3)});
  both("sum/rows [20000,300]", [](const In& in) { return In{ops::sum(in[0], {1})}; },
       {r64(Shape{20000, 300}, 4)});
  both("max/rows [300,2000]", [](const In& in) { return In{ops::max(in[0], 1)}; },
       {r64(Shape{300, 2000}, 5)});
  both("max/columns [50,400,6]", [](const In& in) { return In{ops::max(in[0], 1)}; },
       {r64(Shape{50, 400, 6}, 6)});
  // Ties and NaN: the first maximum wins; a NaN at index 0 sticks, later NaNs are skipped.
  Tensor tricky = Tensor::from_vector<double>({1, 3, 3, 2, NAN, 5, 5, 0, NAN, 2, 7, 1, 4, 4, 4, 4},
                                              Shape{4, 4});
  both(
      "max/ties and NaN", [](const In& in) { return In{ops::argmax(in[0], 1)}; }, {tricky}, false);
  Tensor wide = r64(Shape{3, 700}, 7);
  wide.set({0, 0}, NAN);
  wide.set({1, 300}, NAN);
  wide.set({2, 5}, 9.0);
  wide.set({2, 600}, 9.0);
  both(
      "max/row path ties and NaN", [](const In& in) { return In{ops::argmax(in[0], 1)}; }, {wide},
      false);
}

TEST_CASE("cuda ops: softmax, log-softmax, LayerNorm and cross-entropy on realistic rows") {
  both("softmax/warp rows [500,37]", [](const In& in) { return In{ops::softmax(in[0])}; },
       {r64(Shape{500, 37}, 10, -4, 4)});
  both("softmax/block rows [64,3000]", [](const In& in) { return In{ops::softmax(in[0])}; },
       {r64(Shape{64, 3000}, 11, -4, 4)});
  both("log_softmax/block rows [64,3000]", [](const In& in) { return In{ops::log_softmax(in[0])}; },
       {r64(Shape{64, 3000}, 12, -4, 4)});
  both("softmax/columns [4,2000,3]", [](const In& in) { return In{ops::softmax(in[0], 1)}; },
       {r64(Shape{4, 2000, 3}, 13, -4, 4)});
  both("log_softmax/columns [6,50,33]", [](const In& in) { return In{ops::log_softmax(in[0], 1)}; },
       {r64(Shape{6, 50, 33}, 14, -4, 4)});
  both("layer_norm/warp rows [1000,96]",
       [](const In& in) { return In{ops::layer_norm(in[0], in[1], in[2])}; },
       {r64(Shape{1000, 96}, 20, -2, 3), r64(Shape{96}, 21, 0.5, 1.5), r64(Shape{96}, 22)});
  both("layer_norm/block rows [300,2048]",
       [](const In& in) { return In{ops::layer_norm(in[0], in[1], in[2])}; },
       {r64(Shape{300, 2048}, 23, -2, 3), r64(Shape{2048}, 24, 0.5, 1.5), r64(Shape{2048}, 25)});
  ops::CrossEntropyOptions opt{.ignore_index = -100, .label_smoothing = 0.1};
  Tensor targets = indices(Shape{512}, 3000, 30);
  for (int64_t i = 0; i < 512; i += 7) targets.set({i}, -100);
  both("cross_entropy/[512,3000] smoothing + ignore",
       [opt](const In& in) { return In{ops::cross_entropy(in[0], in[1], opt)}; },
       {r64(Shape{512, 3000}, 31, -3, 3), targets}, true, {0});
  both("cross_entropy/[2048,10] int32 targets",
       [](const In& in) { return In{ops::cross_entropy(in[0], in[1])}; },
       {r64(Shape{2048, 10}, 32, -3, 3), indices(Shape{2048}, 10, 33, DType::kInt32)}, true, {0});
  // The mixed-precision forms a bf16 Transformer runs (Note [16-bit
  // activations]): bfloat16 activations beside float32 parameters, a float32
  // loss of bfloat16 logits; the inputs arrive in float32 and are cast
  // inside, so their gradients come back through the casts.
  const double bf16_tol = 8 * std::ldexp(1.0, -8);
  for (int64_t d : {96, 2048}) {
    SECTION("layer_norm/bfloat16 rows, float32 gamma and beta, d = " + std::to_string(d)) {
      compare(
          "layer_norm/bf16 x",
          [](const In& in) {
            return In{ops::layer_norm(ops::cast(in[0], DType::kBFloat16), in[1], in[2])};
          },
          {r64(Shape{300, d}, 26, -2, 3), r64(Shape{d}, 27, 0.5, 1.5), r64(Shape{d}, 28)},
          DType::kFloat32, bf16_tol);
    }
  }
  SECTION("cross_entropy/bfloat16 logits [512,3000] smoothing + ignore") {
    compare("cross_entropy/bf16 logits",
            [opt](const In& in) {
              return In{ops::cross_entropy(ops::cast(in[0], DType::kBFloat16), in[1], opt)};
            },
            {r64(Shape{512, 3000}, 34, -3, 3), targets}, DType::kFloat32, bf16_tol, true, {0});
  }
}

TEST_CASE("cuda ops: embedding, matmul, masked_fill and dropout at training sizes") {
  both("embedding/V=1000 D=64 n=5000",
       [](const In& in) { return In{ops::embedding(in[0], in[1])}; },
       {r64(Shape{1000, 64}, 40), indices(Shape{50, 100}, 1000, 41)}, true, {0});
  both("embedding/V=50000 D=8 n=300 (sparse rows)",
       [](const In& in) { return In{ops::embedding(in[0], in[1])}; },
       {r64(Shape{50000, 8}, 42), indices(Shape{300}, 50000, 43, DType::kInt32)}, true, {0});
  both("matmul/batched [3,67,129]@[3,129,45]",
       [](const In& in) { return In{ops::matmul(in[0], in[1])}; },
       {r64(Shape{3, 67, 129}, 50), r64(Shape{3, 129, 45}, 51)});
  both("matmul/a^T b^T [129,67]^T@[45,129]^T",
       [](const In& in) { return In{ops::matmul(in[0], in[1], true, true)}; },
       {r64(Shape{129, 67}, 52), r64(Shape{45, 129}, 53)});
  both("matmul/shared b, batched a^T",
       [](const In& in) { return In{ops::matmul(in[0], in[1], true, false)}; },
       {r64(Shape{4, 33, 20}, 54), r64(Shape{33, 17}, 55)});
  both("linear/[256,512]x[384,512]^T + bias",
       [](const In& in) { return In{ops::linear(in[0], in[1], in[2])}; },
       {r64(Shape{256, 512}, 56), r64(Shape{384, 512}, 57), r64(Shape{384}, 58)});
  both("masked_fill/broadcast int mask [8,4,50,50]",
       [](const In& in) { return In{ops::masked_fill(in[0], in[1], -7.0)}; },
       {r64(Shape{8, 4, 50, 50}, 60), indices(Shape{8, 1, 1, 50}, 2, 61, DType::kInt32)}, true,
       {0});
  both("dropout/p=0.25 n=1e6+5",
       [](const In& in) {
         RngScope scope(RngContext{.seed = 3, .step = 1, .micro_batch = 2, .layer = 5});
         return In{ops::dropout(in[0], 0.25, true, 9)};
       },
       {r64(Shape{1000005}, 62)});
}

TEST_CASE("cuda ops: convolution, pooling and batch norm at CNN sizes") {
  ops::Conv2dOptions pad1{.padding = {1, 1}};
  both("conv2d/[4,16,20,20] * [32,16,3,3] pad 1",
       [pad1](const In& in) { return In{ops::conv2d(in[0], in[1], in[2], pad1)}; },
       {r64(Shape{4, 16, 20, 20}, 70), r64(Shape{32, 16, 3, 3}, 71), r64(Shape{32}, 72)});
  ops::Conv2dOptions grouped{.stride = {2, 1}, .padding = {1, 2}, .dilation = {1, 2}, .groups = 4};
  both("conv2d/groups 4, stride 2x1, dilation 1x2",
       [grouped](const In& in) { return In{ops::conv2d(in[0], in[1], in[2], grouped)}; },
       {r64(Shape{2, 16, 17, 15}, 73), r64(Shape{24, 4, 3, 3}, 74), r64(Shape{24}, 75)});
  ops::Conv2dOptions depthwise{.stride = {2, 2}, .padding = {2, 2}, .groups = 16};
  both("conv2d/depthwise 5x5 stride 2",
       [depthwise](const In& in) { return In{ops::conv2d(in[0], in[1], Tensor(), depthwise)}; },
       {r64(Shape{3, 16, 21, 21}, 76), r64(Shape{16, 1, 5, 5}, 77)});
  // Under bf16 precision (Note [16-bit convolution on CUDA]): bfloat16
  // cuDNN graphs forward and backward-data, exact TF32 products for the
  // weight gradient. Inputs arrive in float32, as a bf16 AmoebaNet's do.
  // With one group the CPU multiplies the same rounded operands (8 unit
  // roundoffs). With several the CPU convolves the rounded x and weight in
  // float32 with the float32 upstream gradient, while CUDA rounds that
  // gradient to bfloat16 first: its rounding errors add up over the few
  // hundred terms of a weight-gradient element (a simulation of these
  // shapes gave up to 7.8 unit roundoffs), so 24.
  struct Bf16Conv {
    std::string name;
    ops::Conv2dOptions opt;
    In in;
    double units;
  };
  const std::vector<Bf16Conv> bf16_convs{
      {"one group",
       pad1,
       {r64(Shape{4, 16, 20, 20}, 78), r64(Shape{32, 16, 3, 3}, 79), r64(Shape{32}, 83)},
       8},
      {"groups 4",
       grouped,
       {r64(Shape{2, 16, 17, 15}, 84), r64(Shape{24, 4, 3, 3}, 85), r64(Shape{24}, 86)},
       24},
      {"depthwise", depthwise, {r64(Shape{3, 16, 21, 21}, 87), r64(Shape{16, 1, 5, 5}, 88)}, 24}};
  for (const Bf16Conv& c : bf16_convs) {
    for (const DType act : {DType::kFloat32, DType::kBFloat16}) {  // the activations' dtype
      const std::string name =
          "conv2d/bf16 precision, " + std::string(dtype_name(act)) + " activations, " + c.name;
      SECTION(name) {
        PrecisionScope bf16(Precision::kBFloat16);
        const ops::Conv2dOptions opt = c.opt;
        compare(
            name,
            [opt, act](const In& in) {
              const Tensor y =
                  ops::conv2d(ops::cast(in[0], act), in[1], in.size() > 2 ? in[2] : Tensor(), opt);
              REQUIRE(y.dtype() == act);
              return In{y};
            },
            c.in, DType::kFloat32, c.units * std::ldexp(1.0, -8));
      }
    }
  }
  ops::Pool2dOptions p3{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}};
  both("max_pool2d/3x3 s2 p1 [4,16,33,33]",
       [p3](const In& in) { return In{ops::max_pool2d(in[0], p3)}; },
       {r64(Shape{4, 16, 33, 33}, 80)});
  both("avg_pool2d/3x3 s2 p1 include pad",
       [p3](const In& in) { return In{ops::avg_pool2d(in[0], p3)}; },
       {r64(Shape{4, 16, 33, 33}, 81)});
  ops::Pool2dOptions p3x = p3;
  p3x.count_include_pad = false;
  both("avg_pool2d/3x3 s2 p1 exclude pad",
       [p3x](const In& in) { return In{ops::avg_pool2d(in[0], p3x)}; },
       {r64(Shape{4, 16, 33, 33}, 82)});
  both("batch_norm/train [16,32,14,14]",
       [](const In& in) {
         const auto r = ops::batch_norm(in[0], in[1], in[2], Tensor(), Tensor(), true, 1e-5);
         return In{r.y, r.mean, r.var};
       },
       {r64(Shape{16, 32, 14, 14}, 90, -2, 3), r64(Shape{32}, 91, 0.5, 1.5), r64(Shape{32}, 92)});
  both("batch_norm/train [256,64]",
       [](const In& in) {
         return In{ops::batch_norm(in[0], in[1], in[2], Tensor(), Tensor(), true, 1e-5).y};
       },
       {r64(Shape{256, 64}, 93, -2, 3), r64(Shape{64}, 94, 0.5, 1.5), r64(Shape{64}, 95)});
}

TEST_CASE("cuda ops: the direct convolution fallback matches the CPU kernels") {
  struct Problem {
    Shape x, w;
    ops::Conv2dParams p;
  };
  const std::vector<Problem> problems = {
      {Shape{2, 6, 9, 8}, Shape{4, 6, 3, 3}, {1, 1, 1, 1, 1, 1, 1}},
      {Shape{2, 6, 11, 9}, Shape{9, 2, 3, 2}, {2, 1, 1, 0, 2, 1, 3}},   // groups 3, dilation
      {Shape{1, 4, 10, 10}, Shape{8, 1, 5, 5}, {2, 2, 2, 2, 1, 1, 4}},  // depthwise, multiplier 2
  };
  for (const Problem& pr : problems) {
    for (DType dt : {DType::kFloat64, DType::kFloat32}) {
      const int64_t oh =
          (pr.x[2] + 2 * pr.p.pad_h - pr.p.dilation_h * (pr.w[2] - 1) - 1) / pr.p.stride_h + 1;
      const int64_t ow =
          (pr.x[3] + 2 * pr.p.pad_w - pr.p.dilation_w * (pr.w[3] - 1) - 1) / pr.p.stride_w + 1;
      const Shape y_shape{pr.x[0], pr.w[0], oh, ow};
      const Tensor x = r64(pr.x, 120).to(dt), w = r64(pr.w, 121).to(dt),
                   gy = r64(y_shape, 122).to(dt);
      const double tol = dt == DType::kFloat64 ? 1e-9 : 2e-4;
      INFO("x " << pr.x << " w " << pr.w << " groups " << pr.p.groups << " " << dt);
      Tensor y = Tensor::empty(y_shape, dt), yg = Tensor::empty(y_shape, dt, kGpu);
      ops::conv2d_forward(kCpu, x, w, Tensor(), pr.p, y);
      ops::cuda::conv2d_direct_forward(x.to(kGpu), w.to(kGpu), pr.p, yg);
      check_same("direct forward", yg, y, tol);
      Tensor gx = Tensor::empty(pr.x, dt), gxg = Tensor::empty(pr.x, dt, kGpu);
      ops::conv2d_backward_input(kCpu, gy, w, pr.p, gx);
      ops::cuda::conv2d_direct_backward_input(gy.to(kGpu), w.to(kGpu), pr.p, gxg);
      check_same("direct backward input", gxg, gx, tol);
      Tensor gw = Tensor::empty(pr.w, dt), gwg = Tensor::empty(pr.w, dt, kGpu);
      ops::conv2d_backward_weight(kCpu, gy, x, pr.p, gw);
      ops::cuda::conv2d_direct_backward_weight(gy.to(kGpu), x.to(kGpu), pr.p, gwg);
      check_same("direct backward weight", gwg, gw, tol);
    }
  }
}

// --- 3. bit-level properties ---

TEST_CASE("cuda ops: dropout masks are bit-identical to the CPU's") {
  for (int64_t n : {int64_t{1}, int64_t{4097}, int64_t{1000003}}) {
    for (double p : {0.1, 0.5, 0.9}) {
      RngScope scope(RngContext{.seed = 11, .step = static_cast<uint64_t>(n), .layer = 2});
      const Tensor x = Tensor::full(Shape{n}, 1.0, DType::kFloat32);
      const auto cpu = ops::dropout(x, p, true).to_vector<float>();
      const auto gpu = ops::dropout(x.to(kGpu), p, true).to_vector<float>();
      INFO("n " << n << " p " << p);
      CHECK(cpu == gpu);
    }
  }
}

template <class F>
std::vector<double> twice_equal(F f) {
  const auto a = f(), b = f();
  CHECK(a == b);
  return a;
}

TEST_CASE("cuda ops: LayerNorm and embedding gradients are identical from run to run") {
  const Tensor x = r64(Shape{4000, 256}, 100).to(DType::kFloat32).to(kGpu);
  const Tensor gy = r64(Shape{4000, 256}, 101).to(DType::kFloat32).to(kGpu);
  twice_equal([&] {
    Tensor gamma = Tensor::full(Shape{256}, 1.0, DType::kFloat32, kGpu).detach();
    gamma.set_requires_grad(true);
    ops::layer_norm(x, gamma, Tensor()).backward(gy);
    return gamma.grad().to_vector<double>();
  });
  const Tensor idx = indices(Shape{20000}, 300, 102).to(kGpu);
  const Tensor g = r64(Shape{20000, 32}, 103).to(DType::kFloat32).to(kGpu);
  const auto gpu = twice_equal([&] {
    Tensor w = Tensor::zeros(Shape{300, 32}, DType::kFloat32, kGpu).detach();
    w.set_requires_grad(true);
    ops::embedding(w, idx).backward(g);
    return w.grad().to_vector<double>();
  });
  // Same summation order as the CPU (position order, in T): bit-identical.
  Tensor w = Tensor::zeros(Shape{300, 32}, DType::kFloat32).detach();
  w.set_requires_grad(true);
  ops::embedding(w, idx.to(kCpu)).backward(g.to(kCpu));
  CHECK(w.grad().to_vector<double>() == gpu);
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST_CASE("cuda ops: bad indices and targets throw the CPU's exact message") {
  const Tensor w = r64(Shape{10, 4}, 110);
  const Tensor idx = Tensor::from_vector<int64_t>({1, 2, 10, 3, -1, 4}, Shape{2, 3});
  const std::string cpu = message_of([&] { ops::embedding(w, idx); });
  CHECK_THAT(cpu, Contains("index 10 at position [0, 2]"));
  CHECK(message_of([&] { ops::embedding(w.to(kGpu), idx.to(kGpu)); }) == cpu);

  const Tensor logits = r64(Shape{4, 5}, 111);
  const Tensor t = Tensor::from_vector<int32_t>({1, -100, 7, 2}, Shape{4});
  const std::string cpu_ce = message_of([&] { ops::cross_entropy(logits, t); });
  CHECK_THAT(cpu_ce, Contains("target 7 at position 2"));
  CHECK(message_of([&] { ops::cross_entropy(logits.to(kGpu), t.to(kGpu)); }) == cpu_ce);
}

}  // namespace
}  // namespace gpipe::testing
