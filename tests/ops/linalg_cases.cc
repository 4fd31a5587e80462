// Op-table cases: matmul in every transpose combination, batched and with a
// shared 2-D right operand, and linear.
#include <catch2/catch.hpp>
#include <cmath>

#include "core/precision.h"
#include "ops/elementwise.h"
#include "ops/linalg.h"
#include "ops/shape.h"
#include "tests/ops/op_table.h"

namespace gpipe::testing {
namespace {

using In = std::vector<Tensor>;

// Naive reference of op(a) @ op(b) for 2-D a, b.
Tensor ref_mm(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  const int64_t m = ta ? a.size(1) : a.size(0), k = ta ? a.size(0) : a.size(1);
  const int64_t n = tb ? b.size(0) : b.size(1);
  Tensor c = Tensor::zeros(Shape{m, n}, DType::kFloat64);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p)
        s += (ta ? a.at({p, i}) : a.at({i, p})) * (tb ? b.at({j, p}) : b.at({p, j}));
      c.set({i, j}, s);
    }
  return c;
}

OpCase mm_case(bool ta, bool tb) {
  const Shape sa = ta ? Shape{4, 3} : Shape{3, 4};
  const Shape sb = tb ? Shape{5, 4} : Shape{4, 5};
  return OpCase{
      .name = std::string("matmul/ta=") + (ta ? "1" : "0") + ",tb=" + (tb ? "1" : "0"),
      .covers = {"batched_gemm"},
      .make_inputs =
          [=] {
            return In{rand64(sa, 1), rand64(sb, 2)};
          },
      .fn = [=](const In& in) { return In{ops::matmul(in[0], in[1], ta, tb)}; },
      .check_forward =
          [=](const In& in, const In& out) {
            CHECK(max_abs_diff(out[0], ref_mm(in[0], in[1], ta, tb)) < 1e-12);
          },
  };
}

OpCase batched_case(bool ta, bool tb, bool shared_b) {
  const Shape sa = ta ? Shape{2, 4, 3} : Shape{2, 3, 4};
  const Shape sb =
      shared_b ? (tb ? Shape{5, 4} : Shape{4, 5}) : (tb ? Shape{2, 5, 4} : Shape{2, 4, 5});
  return OpCase{
      .name = std::string("matmul/batched") + (shared_b ? "_shared_b" : "") +
              "/ta=" + (ta ? "1" : "0") + ",tb=" + (tb ? "1" : "0"),
      .covers = {"batched_gemm"},
      .make_inputs =
          [=] {
            return In{rand64(sa, 3), rand64(sb, 4)};
          },
      .fn = [=](const In& in) { return In{ops::matmul(in[0], in[1], ta, tb)}; },
      .check_forward =
          [=](const In& in, const In& out) {
            REQUIRE(out[0].shape() == Shape{2, 3, 5});
            for (int64_t i = 0; i < 2; ++i) {
              Tensor ai = ops::reshape(ops::narrow(in[0], 0, i, 1), {sa[1], sa[2]});
              Tensor bi =
                  shared_b ? in[1] : ops::reshape(ops::narrow(in[1], 0, i, 1), {sb[1], sb[2]});
              Tensor ci = ops::reshape(ops::narrow(out[0], 0, i, 1), {3, 5});
              CHECK(max_abs_diff(ci, ref_mm(ai, bi, ta, tb)) < 1e-12);
            }
          },
  };
}

// linear's output for x [2, 3, 4], w [6, 4], b [6] against a naive loop, with ReLU if `relu`.
void check_linear_3d(const In& in, const In& out, bool relu) {
  REQUIRE(out[0].shape() == Shape{2, 3, 6});
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = 0; t < 3; ++t)
      for (int64_t o = 0; o < 6; ++o) {
        double s = in[2].at({o});
        for (int64_t i = 0; i < 4; ++i) s += in[0].at({b, t, i}) * in[1].at({o, i});
        CHECK(std::abs(out[0].at({b, t, o}) - (relu ? std::max(s, 0.0) : s)) < 1e-12);
      }
}

GPIPE_OP_CASES({
    mm_case(false, false),
    mm_case(true, false),
    mm_case(false, true),
    mm_case(true, true),
    batched_case(false, false, false),
    batched_case(true, true, false),
    batched_case(false, false, true),
    batched_case(false, true, true),
    batched_case(true, false, true),
    // Under bf16 precision (fp16 for float16 inputs) with a float32 weight
    // (a layer's master weight):
    // the 16-bit product of Note [16-bit linear]. With a bfloat16 input the
    // result is bfloat16, made by batched_gemm_bf16_out where the device has
    // it (CUDA, CPU) and by row blocks of float32 products elsewhere. In float64
    // the product is exact (no 16-bit path), so the gradients are checked
    // there; float32 inputs get bf16-rounded operands (hence tolerance32).
    OpCase{
        .name = "linear/bf16_precision_float32_weight",
        .covers = {"batched_gemm", "batched_gemm_bf16_out"},
        .make_inputs =
            [] {
              return In{rand64(Shape{2, 5, 8}, 8), rand64(Shape{6, 8}, 9)};
            },
        .fn =
            [](const In& in) {
              // float16 inputs run at fp16 precision (bf16 would round them further).
              const PrecisionScope precision(
                  in[0].dtype() == DType::kFloat16 ? Precision::kFloat16 : Precision::kBFloat16);
              const Tensor w = is_half(in[1].dtype()) ? ops::cast(in[1], DType::kFloat32) : in[1];
              return In{ops::linear(in[0], w, Tensor())};
            },
        .check_forward =
            [](const In& in, const In& out) {
              REQUIRE(out[0].shape() == Shape{2, 5, 6});
              double worst = 0;
              for (int64_t b = 0; b < 2; ++b)
                for (int64_t t = 0; t < 5; ++t)
                  for (int64_t o = 0; o < 6; ++o) {
                    double s = 0;
                    for (int64_t i = 0; i < 8; ++i) s += in[0].at({b, t, i}) * in[1].at({o, i});
                    worst = std::max(worst, std::abs(out[0].at({b, t, o}) - s));
                  }
              CHECK(worst < 1e-12);
            },
        .tolerance32 = 2e-2,
    },
    OpCase{
        .name = "linear/3d_input_with_bias",
        .covers = {"batched_gemm", "binary_elementwise"},
        .make_inputs =
            [] {
              return In{rand64(Shape{2, 3, 4}, 5), rand64(Shape{6, 4}, 6), rand64(Shape{6}, 7)};
            },
        .fn = [](const In& in) { return In{ops::linear(in[0], in[1], in[2])}; },
        .check_forward = [](const In& in, const In& out) { check_linear_3d(in, out, false); },
    },
    // Note [Fused linear] in ops/linalg.cc. In the float32 run this is one GEMM with the bias
    // and ReLU in its epilogue (float64 takes the composed ops); on CUDA, with the pending
    // kernels on, one cuBLASLt call (Note [cuBLASLt epilogue] in ops/cuda/linear_lt.cc).
    OpCase{
        .name = "linear/3d_input_bias_relu",
        .covers = {"linear_bias_act", "linear_bias_act_takes", "bias_act_backward"},
        .make_inputs =
            [] {
              return In{rand64(Shape{2, 3, 4}, 8), rand64(Shape{6, 4}, 9), rand64(Shape{6}, 10)};
            },
        .fn =
            [](const In& in) {
              return In{ops::linear(in[0], in[1], in[2], ops::FusedActivation::kRelu)};
            },
        .check_forward = [](const In& in, const In& out) { check_linear_3d(in, out, true); },
    },
    // The residual in the same epilogue (a Transformer sublayer's last product: Note [Fused
    // residual] in models/transformer.cc); its gradient is the upstream one.
    OpCase{
        .name = "linear/3d_input_bias_residual",
        .covers = {"linear_bias_act", "linear_bias_act_takes", "bias_act_backward"},
        .make_inputs =
            [] {
              return In{rand64(Shape{2, 3, 4}, 11), rand64(Shape{6, 4}, 12), rand64(Shape{6}, 13),
                        rand64(Shape{2, 3, 6}, 14)};
            },
        .fn =
            [](const In& in) {
              return In{ops::linear(in[0], in[1], in[2], ops::FusedActivation::kNone, in[3])};
            },
        .check_forward =
            [](const In& in, const In& out) {
              check_linear_3d(in, In{ops::sub(out[0], in[3])}, false);
            },
    },
});

}  // namespace
}  // namespace gpipe::testing
