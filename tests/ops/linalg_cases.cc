// Op-table cases: matmul in every transpose combination, batched and with a
// shared 2-D right operand, and linear.
#include <catch2/catch.hpp>
#include <cmath>

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
    OpCase{
        .name = "linear/3d_input_with_bias",
        .covers = {"batched_gemm", "binary_elementwise"},
        .make_inputs =
            [] {
              return In{rand64(Shape{2, 3, 4}, 5), rand64(Shape{6, 4}, 6), rand64(Shape{6}, 7)};
            },
        .fn = [](const In& in) { return In{ops::linear(in[0], in[1], in[2])}; },
        .check_forward =
            [](const In& in, const In& out) {
              REQUIRE(out[0].shape() == Shape{2, 3, 6});
              for (int64_t b = 0; b < 2; ++b)
                for (int64_t t = 0; t < 3; ++t)
                  for (int64_t o = 0; o < 6; ++o) {
                    double s = in[2].at({o});
                    for (int64_t i = 0; i < 4; ++i) s += in[0].at({b, t, i}) * in[1].at({o, i});
                    CHECK(std::abs(out[0].at({b, t, o}) - s) < 1e-12);
                  }
            },
    },
});

}  // namespace
}  // namespace gpipe::testing
