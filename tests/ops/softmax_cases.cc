// Op-table cases: softmax and log_softmax along the last, middle and first
// axes, and on a non-contiguous input.
#include <catch2/catch.hpp>
#include <cmath>

#include "ops/shape.h"
#include "ops/softmax.h"
#include "tests/ops/op_table.h"

namespace gpipe::testing {
namespace {

using In = std::vector<Tensor>;

// Naive (log-)softmax of a contiguous row-major tensor along `axis`, viewed
// as [outer, n, inner]; no max subtraction (inputs are small).
std::vector<double> reference(const Tensor& x, int64_t axis, bool log) {
  const auto v = x.to_vector<double>();
  const Shape& s = x.shape();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= s[d];
  for (int64_t d = axis + 1; d < s.rank(); ++d) inner *= s[d];
  const int64_t n = s[axis];
  std::vector<double> out(v.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < inner; ++c) {
      double sum = 0;
      for (int64_t j = 0; j < n; ++j) sum += std::exp(v[(o * n + j) * inner + c]);
      for (int64_t j = 0; j < n; ++j) {
        const int64_t e = (o * n + j) * inner + c;
        out[e] = log ? v[e] - std::log(sum) : std::exp(v[e]) / sum;
      }
    }
  return out;
}

void check_close(const Tensor& out, const std::vector<double>& ref) {
  const auto o = out.to_vector<double>();
  REQUIRE(o.size() == ref.size());
  for (size_t i = 0; i < o.size(); ++i) CHECK(std::abs(o[i] - ref[i]) < 1e-12);
}

GPIPE_OP_CASES({
    OpCase{
        .name = "softmax/last_axis",
        .covers = {"softmax_forward", "softmax_backward"},
        .make_inputs =
            [] {
              return In{rand64(Shape{3, 5}, 11, -2.0, 2.0)};
            },
        .fn = [](const In& in) { return In{ops::softmax(in[0])}; },
        .check_forward =
            [](const In& in, const In& out) {
              REQUIRE(out[0].shape() == in[0].shape());
              check_close(out[0], reference(in[0], 1, false));
            },
    },
    OpCase{
        .name = "softmax/middle_axis",
        .covers = {"softmax_forward", "softmax_backward"},
        .make_inputs =
            [] {
              return In{rand64(Shape{2, 4, 3}, 12, -2.0, 2.0)};
            },
        .fn = [](const In& in) { return In{ops::softmax(in[0], 1)}; },
        .check_forward = [](const In& in,
                            const In& out) { check_close(out[0], reference(in[0], 1, false)); },
    },
    OpCase{
        .name = "softmax/first_axis_of_transposed_input",
        .covers = {"softmax_forward", "softmax_backward"},
        .make_inputs =
            [] {
              return In{rand64(Shape{4, 3}, 13, -2.0, 2.0)};
            },
        // transpose -> [3, 4] non-contiguous; softmax over its axis 0.
        .fn = [](const In& in) { return In{ops::softmax(ops::transpose(in[0], 0, 1), 0)}; },
        .check_forward =
            [](const In& in, const In& out) {
              REQUIRE(out[0].shape() == Shape{3, 4});
              // Softmax over axis 0 of x^T is softmax over axis 1 of x, transposed.
              const auto ref = reference(in[0], 1, false);
              for (int64_t i = 0; i < 3; ++i)
                for (int64_t j = 0; j < 4; ++j)
                  CHECK(std::abs(out[0].at({i, j}) - ref[j * 3 + i]) < 1e-12);
            },
    },
    OpCase{
        .name = "log_softmax/last_axis",
        .covers = {"log_softmax_forward", "log_softmax_backward"},
        .make_inputs =
            [] {
              return In{rand64(Shape{3, 5}, 14, -2.0, 2.0)};
            },
        .fn = [](const In& in) { return In{ops::log_softmax(in[0], -1)}; },
        .check_forward = [](const In& in,
                            const In& out) { check_close(out[0], reference(in[0], 1, true)); },
    },
    OpCase{
        .name = "log_softmax/middle_axis",
        .covers = {"log_softmax_forward", "log_softmax_backward"},
        .make_inputs =
            [] {
              return In{rand64(Shape{2, 4, 3}, 15, -2.0, 2.0)};
            },
        .fn = [](const In& in) { return In{ops::log_softmax(in[0], -2)}; },
        .check_forward = [](const In& in,
                            const In& out) { check_close(out[0], reference(in[0], 1, true)); },
    },
});

}  // namespace
}  // namespace gpipe::testing
