// Op-table cases: the fused bias + activation (ops::bias_activation) for every
// activation, with and without a bias, against its composed form (add, then
// the activation op), forward here and backward in the test below.
#include <array>
#include <catch2/catch.hpp>
#include <vector>

#include "core/autograd.h"
#include "core/cpu_isa.h"
#include "core/precision.h"
#include "ops/dispatch.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/linalg.h"
#include "tests/ops/op_table.h"

namespace gpipe::testing {
namespace {

using In = std::vector<Tensor>;
using ops::FusedActivation;

constexpr FusedActivation kActs[] = {FusedActivation::kNone,    FusedActivation::kRelu,
                                     FusedActivation::kGelu,    FusedActivation::kTanh,
                                     FusedActivation::kSigmoid, FusedActivation::kGeluTanh,
                                     FusedActivation::kSilu};
const char* act_name(FusedActivation a) {
  switch (a) {
    case FusedActivation::kRelu:
      return "relu";
    case FusedActivation::kGelu:
      return "gelu";
    case FusedActivation::kTanh:
      return "tanh";
    case FusedActivation::kSigmoid:
      return "sigmoid";
    case FusedActivation::kGeluTanh:
      return "gelu_tanh";
    case FusedActivation::kSilu:
      return "silu";
    case FusedActivation::kNone:
      break;
  }
  return "none";
}

std::vector<OpCase> cases() {
  std::vector<OpCase> out;
  for (FusedActivation act : kActs)
    for (bool with_bias : {true, false}) {
      out.push_back(OpCase{
          .name = std::string("bias_activation/") + act_name(act) + (with_bias ? "" : "_no_bias"),
          .covers = {"bias_act_forward", "bias_act_backward"},
          .make_inputs =
              [=] {
                In in{rand64(Shape{2, 3, 5}, 91, -2.0, 2.0)};
                if (with_bias) in.push_back(rand64(Shape{5}, 92));
                return in;
              },
          .fn =
              [=](const In& in) {
                return In{ops::bias_activation(in[0], with_bias ? in[1] : Tensor(), act)};
              },
          .check_forward =
              [=](const In& in, const In& out) {
                const Tensor ref =
                    ops::bias_activation_composed(in[0], with_bias ? in[1] : Tensor(), act);
                CHECK(max_abs_diff(out[0], ref) <= 1e-15);
              },
      });
    }
  return out;
}

const OpCaseRegistrar kBiasActivationCases{cases()};

TEST_CASE("bias_activation: fused gradients equal the composed ops' gradients") {
  for (FusedActivation act : kActs) {
    INFO("activation " << act_name(act));
    auto grads = [&](bool fused) {
      Tensor z = rand64(Shape{7, 33}, 93, -2.0, 2.0).set_requires_grad(true);
      Tensor b = rand64(Shape{33}, 94).set_requires_grad(true);
      Tensor y = fused ? ops::bias_activation(z, b, act) : ops::bias_activation_composed(z, b, act);
      y.backward(rand64(y.shape(), 95));
      return std::make_pair(z.grad(), b.grad());
    };
    const auto [gz, gb] = grads(true);
    const auto [rz, rb] = grads(false);
    CHECK(max_abs_diff(gz, rz) <= 1e-14);
    CHECK(max_abs_diff(gb, rb) <= 1e-13);
  }
}

// The composed reference of a fused linear: `product` (x w^T), then
// bias_activation where there is a bias or an activation, then dropout
// (salt 7) where p > 0, then the residual add.
Tensor composed_linear(const Tensor& product, const Tensor& bias, FusedActivation act,
                       const Tensor& residual, double p) {
  Tensor y = bias.defined() || act != FusedActivation::kNone
                 ? ops::bias_activation(product, bias, act)
                 : product;
  if (p > 0) y = ops::dropout(y, p, true, 7);
  return residual.defined() ? ops::add(residual, y) : y;
}

// ops::linear against composed_linear, forward and backward, bit for bit, at
// every ISA level, for every combination of ReLU, bias, residual and dropout,
// on inputs (and residual) of dtype `io`: float32, or bfloat16 under bf16
// precision, whose reference product is the 16-bit linear's (Note [16-bit
// linear]). The weight and bias are float32, as a layer's.
void check_fused_linear(DType io, const std::vector<std::array<int64_t, 3>>& shapes) {
  const bool bf16 = io == DType::kBFloat16;
  const PrecisionScope precision(bf16 ? Precision::kBFloat16 : Precision::kFloat32);
  for (int level = 0; level <= static_cast<int>(detected_cpu_isa()); ++level) {
    CpuIsaGuard guard(static_cast<CpuIsa>(level));
    for (const auto& [rows, in, out] : shapes)
      for (FusedActivation act : {FusedActivation::kRelu, FusedActivation::kNone})
        for (bool with_bias : {true, false})
          for (bool with_residual : {false, true})
            for (double p : {0.0, 0.3}) {
              if (!with_bias && !with_residual && p == 0 && act == FusedActivation::kNone) continue;
              INFO(cpu_isa_name(cpu_isa())
                   << " " << io << " rows " << rows << " in " << in << " out " << out << " "
                   << act_name(act) << (with_bias ? "" : " no bias")
                   << (with_residual ? " residual" : "") << " dropout " << p);
              int64_t fused_calls = 0;
              auto run = [&](bool fused) {
                Tensor x = ops::cast(rand64(Shape{2, rows, in}, 101), io).set_requires_grad(true);
                Tensor w =
                    ops::cast(rand64(Shape{out, in}, 102), DType::kFloat32).set_requires_grad(true);
                Tensor b =
                    ops::cast(rand64(Shape{out}, 103), DType::kFloat32).set_requires_grad(true);
                Tensor r = ops::cast(rand64(Shape{2, rows, out}, 105), io).set_requires_grad(true);
                const Tensor bias = with_bias ? b : Tensor();
                const Tensor residual = with_residual ? r : Tensor();
                ops::kernel_profile::reset();
                ops::kernel_profile::set_enabled(true);
                Tensor y;
                if (fused)
                  y = ops::linear(x, w, bias, act, residual, {p, 7});
                else
                  y = composed_linear(
                      bf16 ? ops::linear(x, w, Tensor()) : ops::matmul(x, w, false, true), bias,
                      act, residual, p);
                ops::kernel_profile::set_enabled(false);
                for (const auto& e : ops::kernel_profile::snapshot())
                  if (e.name == "linear_bias_act") fused_calls += e.calls;
                y.backward(ops::cast(rand64(y.shape(), 104), DType::kFloat32));  // a float32 seed
                return std::vector<Tensor>{y, x.grad(), w.grad(), with_bias ? b.grad() : x.grad(),
                                           with_residual ? r.grad() : x.grad()};
              };
              const std::vector<Tensor> fused = run(true);
              CHECK(fused_calls == 1);  // the fused form ran...
              const std::vector<Tensor> composed = run(false);
              CHECK(fused_calls == 1);  // ...and the reference did not
              CHECK(fused[0].dtype() == io);
              CHECK(fused[1].dtype() == io);
              for (size_t i = 0; i < fused.size(); ++i) {
                CHECK(fused[i].dtype() == composed[i].dtype());
                CHECK(max_abs_diff(fused[i], composed[i]) == 0);
              }
            }
  }
}

TEST_CASE("linear: the fused float32 GEMM epilogue has the composed ops' bits, forward and back") {
  // Note [Fused linear] in ops/linalg.cc. matmul, bias_activation, dropout and the residual add
  // are the reference for a product the packed GEMM takes in tiles (16 MFLOP and more; 110
  // columns, so a tile row's flat index is any multiple of 2: Note [Fused dropout]) and two
  // small enough for Eigen, with the epilogue after the product.
  check_fused_linear(DType::kFloat32, {{150, 256, 110}, {96, 80, 72}, {3, 5, 4}});
}

TEST_CASE("linear: the fused bfloat16 GEMM epilogue has the composed 16-bit ops' bits") {
  // Note [Fused linear] in ops/linalg.cc, bf16 precision on a bfloat16 input: the 16-bit
  // product (Note [16-bit linear]) then bias_activation, dropout and the add are the
  // reference, for one k-slice and for several (in = 900), and an odd width (37).
  check_fused_linear(DType::kBFloat16, {{96, 80, 72}, {3, 5, 4}, {20, 900, 40}, {40, 64, 37}});
}

TEST_CASE("linear: a residual of the wrong shape or a dropout p outside [0, 1) is refused") {
  const Tensor x = rand64(Shape{2, 3, 4}, 1), w = rand64(Shape{5, 4}, 2);
  CHECK_THROWS_WITH(
      ops::linear(x, w, Tensor(), FusedActivation::kNone, rand64(Shape{2, 3, 4}, 3)),
      Catch::Contains("linear: residual [2, 3, 4] does not match the output [2, 3, 5]"));
  CHECK_THROWS_WITH(ops::linear(x, w, Tensor(), FusedActivation::kNone, Tensor(), {1.0, 0}),
                    Catch::Contains("linear: dropout p must be in [0, 1), got 1"));
  // An activation before the residual: the activation's output plus the residual.
  const Tensor r = rand64(Shape{2, 3, 5}, 4);
  CHECK(max_abs_diff(ops::linear(x, w, Tensor(), FusedActivation::kTanh, r),
                     ops::add(r, ops::tanh(ops::linear(x, w)))) <= 1e-15);
}

TEST_CASE("linear with an activation equals linear then the activation") {
  Tensor x = rand64(Shape{4, 6}, 96);
  Tensor w = rand64(Shape{5, 6}, 97), b = rand64(Shape{5}, 98);
  CHECK(max_abs_diff(ops::linear(x, w, b, FusedActivation::kRelu),
                     ops::relu(ops::linear(x, w, b))) <= 1e-15);
  CHECK(max_abs_diff(ops::linear(x, w, Tensor(), FusedActivation::kTanh),
                     ops::tanh(ops::linear(x, w))) <= 1e-15);
}

}  // namespace
}  // namespace gpipe::testing
