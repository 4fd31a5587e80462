// Op-table cases: views, concat/split, broadcasting views and sum_to.
#include <catch2/catch.hpp>

#include "ops/shape.h"
#include "tests/ops/op_table.h"

namespace gpipe::testing {
namespace {

using In = std::vector<Tensor>;

// Reads x at a multi-index given as a flat row-major position in `shape`.
double at_flat(const Tensor& x, std::vector<int64_t> idx) {
  int64_t off = x.offset();
  for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * x.strides()[d];
  return static_cast<const double*>(x.storage()->data())[off];
}

GPIPE_OP_CASES({
    OpCase{
        .name = "reshape/infer",
        .make_inputs =
            [] {
              return In{rand64(Shape{2, 3, 4}, 1)};
            },
        .fn =
            [](const In& in) {
              return In{ops::reshape(in[0], {4, -1})};
            },
        .check_forward =
            [](const In& in, const In& out) {
              REQUIRE(out[0].shape() == Shape{4, 6});
              CHECK(out[0].to_vector<double>() == in[0].to_vector<double>());
            },
    },
    OpCase{
        .name = "permute/3d",
        .make_inputs =
            [] {
              return In{rand64(Shape{2, 3, 4}, 2)};
            },
        .fn =
            [](const In& in) {
              return In{ops::permute(in[0], {2, 0, 1})};
            },
        .check_forward =
            [](const In& in, const In& out) {
              REQUIRE(out[0].shape() == Shape{4, 2, 3});
              for (int64_t i = 0; i < 2; ++i)
                for (int64_t j = 0; j < 3; ++j)
                  for (int64_t k = 0; k < 4; ++k)
                    CHECK(out[0].at({k, i, j}) == in[0].at({i, j, k}));
            },
    },
    OpCase{
        .name = "transpose/then_reshape_copies",
        .make_inputs =
            [] {
              return In{rand64(Shape{3, 4}, 3)};
            },
        .fn = [](const In& in) { return In{ops::reshape(ops::transpose(in[0], 0, 1), {-1})}; },
        .check_forward =
            [](const In& in, const In& out) {
              for (int64_t i = 0; i < 3; ++i)
                for (int64_t j = 0; j < 4; ++j) CHECK(out[0].at({j * 3 + i}) == in[0].at({i, j}));
            },
    },
    OpCase{
        .name = "slice/step",
        .make_inputs =
            [] {
              return In{rand64(Shape{3, 7}, 4)};
            },
        .fn = [](const In& in) { return In{ops::slice(in[0], 1, 1, 6, 2)}; },
        .check_forward =
            [](const In& in, const In& out) {
              REQUIRE(out[0].shape() == Shape{3, 3});
              for (int64_t i = 0; i < 3; ++i)
                for (int64_t j = 0; j < 3; ++j)
                  CHECK(out[0].at({i, j}) == in[0].at({i, 1 + 2 * j}));
            },
    },
    OpCase{
        .name = "narrow/batch",
        .make_inputs =
            [] {
              return In{rand64(Shape{5, 2}, 5)};
            },
        .fn = [](const In& in) { return In{ops::narrow(in[0], 0, 1, 3)}; },
        .check_forward =
            [](const In& in, const In& out) {
              for (int64_t i = 0; i < 3; ++i)
                for (int64_t j = 0; j < 2; ++j) CHECK(out[0].at({i, j}) == in[0].at({i + 1, j}));
            },
    },
    OpCase{
        .name = "expand/and_sum_to",
        .covers = {"reduce_sum"},
        .make_inputs =
            [] {
              return In{rand64(Shape{3, 1}, 6)};
            },
        .fn =
            [](const In& in) {
              return In{ops::expand(in[0], Shape{2, 3, 4})};
            },
        .check_forward =
            [](const In& in, const In& out) {
              for (int64_t b = 0; b < 2; ++b)
                for (int64_t i = 0; i < 3; ++i)
                  for (int64_t j = 0; j < 4; ++j)
                    CHECK(at_flat(out[0], {b, i, j}) == in[0].at({i, 0}));
            },
    },
    OpCase{
        .name = "concat/axis1",
        .make_inputs =
            [] {
              return In{rand64(Shape{2, 2}, 7), rand64(Shape{2, 3}, 8)};
            },
        .fn =
            [](const In& in) {
              return In{ops::concat({in[0], in[1]}, 1)};
            },
        .check_forward =
            [](const In& in, const In& out) {
              REQUIRE(out[0].shape() == Shape{2, 5});
              for (int64_t i = 0; i < 2; ++i) {
                for (int64_t j = 0; j < 2; ++j) CHECK(out[0].at({i, j}) == in[0].at({i, j}));
                for (int64_t j = 0; j < 3; ++j) CHECK(out[0].at({i, 2 + j}) == in[1].at({i, j}));
              }
            },
    },
    OpCase{
        .name = "split/uneven_batch",
        .make_inputs =
            [] {
              return In{rand64(Shape{5, 3}, 9)};
            },
        .fn = [](const In& in) { return ops::chunk(in[0], 2, 0); },
        .check_forward =
            [](const In& in, const In& out) {
              REQUIRE(out.size() == 2);
              REQUIRE(out[0].shape() == Shape{3, 3});
              REQUIRE(out[1].shape() == Shape{2, 3});
              CHECK(out[1].at({1, 2}) == in[0].at({4, 2}));
            },
    },
    OpCase{
        .name = "split/one_piece_used",
        .make_inputs =
            [] {
              return In{rand64(Shape{4, 2}, 10)};
            },
        .fn =
            [](const In& in) {
              return In{ops::split(in[0], {1, 3}, 0)[1]};
            },
        .check_forward =
            [](const In& in, const In& out) {
              CHECK(out[0].at({0, 1}) == in[0].at({1, 1}));
            },
    },
    OpCase{
        .name = "squeeze_unsqueeze_flatten",
        .make_inputs =
            [] {
              return In{rand64(Shape{2, 1, 3}, 11)};
            },
        .fn =
            [](const In& in) {
              return In{ops::flatten(ops::unsqueeze(ops::squeeze(in[0], 1), 0), 1)};
            },
        .check_forward =
            [](const In& in, const In& out) {
              CHECK(out[0].shape() == Shape{1, 6});
            },
    },
});

}  // namespace
}  // namespace gpipe::testing
