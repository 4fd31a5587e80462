// Op-table cases: layer_norm with gamma and beta, gamma only, no affine part,
// and a tall input whose parameter gradients are reduced over several row
// chunks.
#include <catch2/catch.hpp>
#include <cmath>

#include "ops/layer_norm.h"
#include "tests/ops/op_table.h"

namespace gpipe::testing {
namespace {

using In = std::vector<Tensor>;

// Naive layer norm over the last axis; gamma/beta may be undefined.
void check_layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps,
                      const Tensor& out) {
  REQUIRE(out.shape() == x.shape());
  const auto v = x.to_vector<double>(), o = out.to_vector<double>();
  const auto g = gamma.defined() ? gamma.to_vector<double>() : std::vector<double>();
  const auto b = beta.defined() ? beta.to_vector<double>() : std::vector<double>();
  const int64_t d = x.size(-1), rows = x.numel() / d;
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < d; ++i) mean += v[r * d + i] / d;
    for (int64_t i = 0; i < d; ++i) var += (v[r * d + i] - mean) * (v[r * d + i] - mean) / d;
    for (int64_t i = 0; i < d; ++i) {
      double y = (v[r * d + i] - mean) / std::sqrt(var + eps);
      if (!g.empty()) y *= g[i];
      if (!b.empty()) y += b[i];
      worst = std::max(worst, std::abs(o[r * d + i] - y));
    }
  }
  CHECK(worst < 1e-10);
}

GPIPE_OP_CASES({
    OpCase{
        .name = "layer_norm/affine",
        .covers = {"layer_norm_forward", "layer_norm_backward"},
        .make_inputs =
            [] {
              return In{rand64(Shape{2, 3, 5}, 21), rand64(Shape{5}, 22, 0.5, 1.5),
                        rand64(Shape{5}, 23)};
            },
        .fn = [](const In& in) { return In{ops::layer_norm(in[0], in[1], in[2])}; },
        .check_forward = [](const In& in,
                            const In& out) { check_layer_norm(in[0], in[1], in[2], 1e-5, out[0]); },
    },
    OpCase{
        .name = "layer_norm/no_affine",
        .covers = {"layer_norm_forward", "layer_norm_backward"},
        .make_inputs =
            [] {
              return In{rand64(Shape{4, 6}, 24)};
            },
        .fn = [](const In& in) { return In{ops::layer_norm(in[0], Tensor(), Tensor(), 1e-3)}; },
        .check_forward =
            [](const In& in, const In& out) {
              check_layer_norm(in[0], Tensor(), Tensor(), 1e-3, out[0]);
            },
    },
    OpCase{
        .name = "layer_norm/gamma_only",
        .covers = {"layer_norm_forward", "layer_norm_backward"},
        .make_inputs =
            [] {
              return In{rand64(Shape{3, 4}, 25), rand64(Shape{4}, 26, 0.5, 1.5)};
            },
        .fn = [](const In& in) { return In{ops::layer_norm(in[0], in[1], Tensor())}; },
        .check_forward =
            [](const In& in, const In& out) {
              check_layer_norm(in[0], in[1], Tensor(), 1e-5, out[0]);
            },
    },
    OpCase{
        // 40 x 600 elements: the backward reduces gamma/beta over two row chunks.
        .name = "layer_norm/tall_param_grads",
        .covers = {"layer_norm_forward", "layer_norm_backward"},
        .make_inputs =
            [] {
              return In{rand64(Shape{40, 600}, 27), rand64(Shape{600}, 28, 0.5, 1.5),
                        rand64(Shape{600}, 29)};
            },
        .fn = [](const In& in) { return In{ops::layer_norm(in[0], in[1], in[2])}; },
        .check_forward = [](const In& in,
                            const In& out) { check_layer_norm(in[0], in[1], in[2], 1e-5, out[0]); },
        .grad_inputs = {1, 2},
    },
});

}  // namespace
}  // namespace gpipe::testing
