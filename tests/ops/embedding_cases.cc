// Op-table cases: embedding gather with repeated indices (the gradient is a
// scatter-add) and int32 indices of rank 1.
#include <catch2/catch.hpp>

#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "tests/ops/op_table.h"

namespace gpipe::testing {
namespace {

using In = std::vector<Tensor>;

void check_gather(const Tensor& weight, const Tensor& indices, const Tensor& out) {
  const int64_t d = weight.size(1);
  std::vector<int64_t> dims = indices.shape().dims();
  dims.push_back(d);
  REQUIRE(out.shape() == Shape(dims));
  const auto idx = indices.to_vector<int64_t>();
  const auto o = out.to_vector<double>();
  for (size_t k = 0; k < idx.size(); ++k)
    for (int64_t c = 0; c < d; ++c) CHECK(o[k * d + c] == weight.at({idx[k], c}));
}

GPIPE_OP_CASES({
    OpCase{
        .name = "embedding/repeated_indices",
        .covers = {"embedding_forward", "embedding_backward"},
        .make_inputs =
            [] {
              return In{rand64(Shape{5, 3}, 31),
                        Tensor::from_vector<int64_t>({1, 3, 1, 0, 3, 1}, Shape{2, 3})};
            },
        .fn = [](const In& in) { return In{ops::embedding(in[0], in[1])}; },
        .check_forward = [](const In& in, const In& out) { check_gather(in[0], in[1], out[0]); },
        .grad_inputs = {0},
    },
    OpCase{
        .name = "embedding/int32_indices",
        .covers = {"embedding_forward", "embedding_backward"},
        .make_inputs =
            [] {
              return In{rand64(Shape{4, 2}, 32),
                        Tensor::from_vector<int32_t>({3, 0, 3, 2, 3}, Shape{5})};
            },
        .fn = [](const In& in) { return In{ops::embedding(in[0], in[1])}; },
        .check_forward = [](const In& in, const In& out) { check_gather(in[0], in[1], out[0]); },
        .grad_inputs = {0},
    },
    OpCase{
        // A table computed by another op: the dense-gradient path (a
        // parameter's gradient is added into its grad() in place instead).
        .name = "embedding/computed_table",
        .covers = {"embedding_forward", "embedding_backward"},
        .make_inputs =
            [] {
              return In{rand64(Shape{5, 3}, 33),
                        Tensor::from_vector<int64_t>({4, 0, 4, 2}, Shape{4})};
            },
        .fn = [](const In& in) { return In{ops::embedding(ops::mul(in[0], in[0]), in[1])}; },
        .check_forward = [](const In& in,
                            const In& out) { check_gather(ops::mul(in[0], in[0]), in[1], out[0]); },
        .grad_inputs = {0},
    },
});

}  // namespace
}  // namespace gpipe::testing
