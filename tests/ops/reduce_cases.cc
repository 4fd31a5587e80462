// Op-table cases: sum, mean, max over axes.
#include <catch2/catch.hpp>
#include <cmath>

#include "ops/reduce.h"
#include "ops/reduce_kernels.h"
#include "tests/ops/op_table.h"

namespace gpipe::testing {
namespace {

using In = std::vector<Tensor>;

GPIPE_OP_CASES({
    OpCase{
        .name = "sum/all",
        .covers = {"reduce_sum"},
        .make_inputs =
            [] {
              return In{rand64(Shape{3, 4}, 1)};
            },
        .fn = [](const In& in) { return In{ops::sum(in[0])}; },
        .check_forward =
            [](const In& in, const In& out) {
              double s = 0;
              for (double v : in[0].to_vector<double>()) s += v;
              REQUIRE(out[0].rank() == 0);
              CHECK(std::abs(out[0].item() - s) < 1e-12);
            },
    },
    OpCase{
        .name = "sum/middle_axis_keepdim",
        .covers = {"reduce_sum"},
        .make_inputs =
            [] {
              return In{rand64(Shape{2, 3, 4}, 2)};
            },
        .fn = [](const In& in) { return In{ops::sum(in[0], {1}, true)}; },
        .check_forward =
            [](const In& in, const In& out) {
              REQUIRE(out[0].shape() == Shape{2, 1, 4});
              for (int64_t a = 0; a < 2; ++a)
                for (int64_t c = 0; c < 4; ++c) {
                  double s = 0;
                  for (int64_t b = 0; b < 3; ++b) s += in[0].at({a, b, c});
                  CHECK(std::abs(out[0].at({a, 0, c}) - s) < 1e-12);
                }
            },
    },
    OpCase{
        .name = "mean/two_axes",
        .covers = {"reduce_sum"},
        .make_inputs =
            [] {
              return In{rand64(Shape{2, 3, 4}, 3)};
            },
        .fn =
            [](const In& in) {
              return In{ops::mean(in[0], {0, 2})};
            },
        .check_forward =
            [](const In& in, const In& out) {
              REQUIRE(out[0].shape() == Shape{3});
              for (int64_t b = 0; b < 3; ++b) {
                double s = 0;
                for (int64_t a = 0; a < 2; ++a)
                  for (int64_t c = 0; c < 4; ++c) s += in[0].at({a, b, c});
                CHECK(std::abs(out[0].at({b}) - s / 8) < 1e-12);
              }
            },
    },
    OpCase{
        .name = "max/last_axis",
        .covers = {"reduce_max", "reduce_max_backward"},
        .make_inputs =
            [] {
              return In{rand64(Shape{3, 5}, 4)};
            },
        .fn = [](const In& in) { return In{ops::max(in[0], -1)}; },
        .check_forward =
            [](const In& in, const In& out) {
              for (int64_t i = 0; i < 3; ++i) {
                double m = -1e300;
                for (int64_t j = 0; j < 5; ++j) m = std::max(m, in[0].at({i, j}));
                CHECK(out[0].at({i}) == m);
              }
            },
    },
    OpCase{
        .name = "max/first_axis",
        .covers = {"reduce_max", "reduce_max_backward"},
        .make_inputs =
            [] {
              return In{rand64(Shape{4, 3}, 5)};
            },
        .fn = [](const In& in) { return In{ops::max(in[0], 0, true)}; },
        .check_forward =
            [](const In& in, const In& out) {
              Tensor idx = ops::argmax(in[0], 0);
              for (int64_t j = 0; j < 3; ++j) {
                double m = -1e300;
                int64_t at = 0;
                for (int64_t i = 0; i < 4; ++i)
                  if (in[0].at({i, j}) > m) m = in[0].at({i, j}), at = i;
                CHECK(out[0].at({0, j}) == m);
                CHECK(idx.at({j}) == at);
              }
            },
    },
    // The gradient norm's reduction: a tensor of several kSquaresBlock blocks
    // (the last one partial), a small one, a matrix and an empty one.
    OpCase{
        .name = "sum_of_squares/blocks (no gradient: a norm, not an op)",
        .covers = {"sum_squares_into", "sum_squares_many"},
        .make_inputs =
            [] {
              return In{rand64(Shape{2 * ops::kSquaresBlock + 5}, 91), rand64(Shape{7}, 92),
                        rand64(Shape{3, 4}, 93), rand64(Shape{0}, 94)};
            },
        .fn =
            [](const In& in) {
              const Tensor s =
                  Tensor::from_vector(std::vector<double>{ops::sum_of_squares(in)}, Shape{1});
              return In{s.to(in[0].device())};  // the op-table compares outputs on the device
            },
        .check_forward =
            [](const In& in, const In& out) {
              double want = 0;
              for (const Tensor& t : in)
                for (double v : t.to_vector<double>()) want += v * v;
              CHECK(std::abs(out[0].to_vector<double>()[0] - want) <= 1e-12 * want);
            },
        .check_grad = false,
    },
});

}  // namespace
}  // namespace gpipe::testing
