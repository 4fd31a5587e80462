// Op-table cases: masked_fill with a broadcast float mask (causal), an int
// padding mask broadcast over heads and queries, and a mask broadcast along
// the last axis.
#include <catch2/catch.hpp>

#include "ops/mask.h"
#include "tests/ops/op_table.h"

namespace gpipe::testing {
namespace {

using In = std::vector<Tensor>;

// Naive fill: mask indexed by broadcasting (right-aligned, size-1 axes repeat).
void check_fill(const Tensor& x, const Tensor& mask, double value, const Tensor& out) {
  REQUIRE(out.shape() == x.shape());
  const auto v = x.to_vector<double>(), o = out.to_vector<double>(), m = mask.to_vector<double>();
  const Shape& s = x.shape();
  const int64_t r = s.rank(), mr = mask.rank();
  for (int64_t e = 0; e < x.numel(); ++e) {
    int64_t rem = e, me = 0, mstride = 1;
    for (int64_t d = r - 1; d >= 0; --d) {
      const int64_t i = rem % s[d];
      rem /= s[d];
      const int64_t md = d - (r - mr);
      if (md < 0) continue;
      const int64_t msize = mask.shape()[md];
      me += (msize == 1 ? 0 : i) * mstride;
      mstride *= msize;
    }
    CHECK(o[e] == (m[me] != 0 ? value : v[e]));
  }
}

GPIPE_OP_CASES({
    OpCase{
        .name = "masked_fill/causal_float_mask",
        .covers = {"masked_fill_apply"},
        .make_inputs =
            [] {
              return In{rand64(Shape{2, 3, 4}, 61), ops::causal_mask(3, 4)};
            },
        .fn = [](const In& in) { return In{ops::masked_fill(in[0], in[1], -5.0)}; },
        .check_forward = [](const In& in,
                            const In& out) { check_fill(in[0], in[1], -5.0, out[0]); },
        .grad_inputs = {0},
    },
    OpCase{
        .name = "masked_fill/int_padding_mask",
        .covers = {"masked_fill_apply"},
        .make_inputs =
            [] {
              return In{rand64(Shape{2, 2, 3, 4}, 62),
                        ops::padding_mask(Tensor::from_vector<int64_t>({2, 4}, Shape{2}), 4,
                                          DType::kInt64)};
            },
        .fn = [](const In& in) { return In{ops::masked_fill(in[0], in[1], 3.0)}; },
        .check_forward = [](const In& in, const In& out) { check_fill(in[0], in[1], 3.0, out[0]); },
        .grad_inputs = {0},
    },
    OpCase{
        .name = "masked_fill/mask_broadcast_along_last_axis",
        .covers = {"masked_fill_apply"},
        .make_inputs =
            [] {
              return In{rand64(Shape{2, 3, 4}, 63),
                        Tensor::from_vector<int32_t>({1, 0, 0, 0, 1, 1}, Shape{2, 3, 1})};
            },
        .fn = [](const In& in) { return In{ops::masked_fill(in[0], in[1], 0.5)}; },
        .check_forward = [](const In& in, const In& out) { check_fill(in[0], in[1], 0.5, out[0]); },
        .grad_inputs = {0},
    },
});

}  // namespace
}  // namespace gpipe::testing
