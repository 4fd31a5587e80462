// Op-table cases: the fused bias + activation (ops::bias_activation) for every
// activation, with and without a bias, against its composed form (add, then
// the activation op), forward here and backward in the test below.
#include <catch2/catch.hpp>

#include "core/autograd.h"
#include "ops/elementwise.h"
#include "ops/linalg.h"
#include "tests/ops/op_table.h"

namespace gpipe::testing {
namespace {

using In = std::vector<Tensor>;
using ops::FusedActivation;

constexpr FusedActivation kActs[] = {FusedActivation::kNone, FusedActivation::kRelu,
                                     FusedActivation::kGelu, FusedActivation::kTanh,
                                     FusedActivation::kSigmoid};
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
