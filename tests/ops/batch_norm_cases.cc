// Op-table cases for batch_norm: training on [N, C, H, W] and [N, C] (output
// and gradients through the batch statistics, with and without gamma/beta),
// the batch statistics themselves, eval mode, and update_running_stats.
#include <catch2/catch.hpp>
#include <cmath>
#include <string>

#include "ops/batch_norm.h"
#include "tests/ops/op_table.h"

namespace gpipe::testing {
namespace {

using In = std::vector<Tensor>;

// Per-channel statistics of x [N, C, *]: mean and biased variance, by direct loops.
void ref_stats(const Tensor& x, std::vector<double>& mean, std::vector<double>& var) {
  const auto xv = x.to_vector<double>();
  const int64_t n = x.size(0), c = x.size(1), s = x.numel() / (n * c);
  mean.assign(c, 0.0);
  var.assign(c, 0.0);
  for (int64_t ch = 0; ch < c; ++ch) {
    for (int64_t b = 0; b < n; ++b)
      for (int64_t e = 0; e < s; ++e) mean[ch] += xv[(b * c + ch) * s + e];
    mean[ch] /= static_cast<double>(n * s);
    for (int64_t b = 0; b < n; ++b)
      for (int64_t e = 0; e < s; ++e) {
        const double d = xv[(b * c + ch) * s + e] - mean[ch];
        var[ch] += d * d;
      }
    var[ch] /= static_cast<double>(n * s);
  }
}

// y = (x - mean) / sqrt(var + eps) * gamma + beta, elementwise.
Tensor ref_normalize(const Tensor& x, const std::vector<double>& mean,
                     const std::vector<double>& var, const Tensor& gamma, const Tensor& beta,
                     double eps) {
  const auto xv = x.to_vector<double>();
  const int64_t n = x.size(0), c = x.size(1), s = x.numel() / (n * c);
  std::vector<double> y(xv.size());
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t e = 0; e < s; ++e) {
        const int64_t i = (b * c + ch) * s + e;
        const double g = gamma.defined() ? gamma.at({ch}) : 1.0;
        const double sh = beta.defined() ? beta.at({ch}) : 0.0;
        y[i] = (xv[i] - mean[ch]) / std::sqrt(var[ch] + eps) * g + sh;
      }
  return Tensor::from_vector(y, x.shape());
}

const std::vector<std::string> kTrainKernels = {"batch_norm_stats", "batch_norm_forward",
                                                "batch_norm_backward"};

OpCase train_case(std::string name, Shape x_shape, bool affine, uint64_t seed) {
  const int64_t c = x_shape[1];
  return OpCase{
      .name = "batch_norm/train_" + name,
      .covers = kTrainKernels,
      .make_inputs =
          [=] {
            In in{rand64(x_shape, seed, -2.0, 3.0)};
            if (affine) {
              in.push_back(rand64(Shape{c}, seed + 1, 0.5, 1.5));
              in.push_back(rand64(Shape{c}, seed + 2));
            }
            return in;
          },
      .fn =
          [=](const In& in) {
            const Tensor gamma = affine ? in[1] : Tensor(), beta = affine ? in[2] : Tensor();
            return In{ops::batch_norm(in[0], gamma, beta, Tensor(), Tensor(), true, 1e-3).y};
          },
      .check_forward =
          [=](const In& in, const In& out) {
            std::vector<double> mean, var;
            ref_stats(in[0], mean, var);
            const Tensor ref = ref_normalize(in[0], mean, var, affine ? in[1] : Tensor(),
                                             affine ? in[2] : Tensor(), 1e-3);
            REQUIRE(out[0].shape() == in[0].shape());
            CHECK(max_abs_diff(out[0], ref) < 1e-10);
          },
  };
}

OpCase eval_case(std::string name, Shape x_shape, uint64_t seed) {
  const int64_t c = x_shape[1];
  return OpCase{
      .name = "batch_norm/eval_" + name,
      .covers = {"batch_norm_forward", "batch_norm_backward"},
      .make_inputs =
          [=] {
            return In{rand64(x_shape, seed), rand64(Shape{c}, seed + 1, 0.5, 1.5),
                      rand64(Shape{c}, seed + 2), rand64(Shape{c}, seed + 3, -0.5, 0.5),
                      rand64(Shape{c}, seed + 4, 0.2, 2.0)};
          },
      .fn =
          [](const In& in) {
            return In{ops::batch_norm(in[0], in[1], in[2], in[3], in[4], false, 1e-5).y};
          },
      .check_forward =
          [](const In& in, const In& out) {
            const Tensor ref = ref_normalize(in[0], in[3].to_vector<double>(),
                                             in[4].to_vector<double>(), in[1], in[2], 1e-5);
            CHECK(max_abs_diff(out[0], ref) < 1e-12);
          },
      .grad_inputs = {0, 1, 2},  // running statistics get no gradient
  };
}

GPIPE_OP_CASES({
    train_case("4d", Shape{3, 2, 3, 2}, true, 1),
    train_case("2d", Shape{5, 3}, true, 10),
    train_case("4d_no_affine", Shape{2, 3, 2, 2}, false, 20),
    train_case("3d", Shape{2, 2, 4}, true, 30),
    OpCase{
        .name = "batch_norm/train_batch_statistics (no grad)",
        .covers = {"batch_norm_stats"},
        .make_inputs =
            [] {
              return In{rand64(Shape{3, 4, 2, 3}, 40, -1.0, 5.0)};
            },
        .fn =
            [](const In& in) {
              const auto r = ops::batch_norm(in[0], Tensor(), Tensor(), Tensor(), Tensor(), true);
              return In{r.mean, r.var};
            },
        .check_forward =
            [](const In& in, const In& out) {
              std::vector<double> mean, var;
              ref_stats(in[0], mean, var);
              CHECK(max_abs_diff(out[0], Tensor::from_vector(mean, Shape{4})) < 1e-12);
              CHECK(max_abs_diff(out[1], Tensor::from_vector(var, Shape{4})) < 1e-12);
            },
        .check_grad = false,
    },
    eval_case("4d", Shape{2, 3, 2, 3}, 50),
    eval_case("2d", Shape{4, 3}, 60),
    OpCase{
        .name = "batch_norm/update_running_stats (no grad)",
        .covers = {"batch_norm_update_running_stats"},
        .make_inputs =
            [] {
              return In{rand64(Shape{3}, 70), rand64(Shape{3}, 71, 0.5, 1.5), rand64(Shape{3}, 72),
                        rand64(Shape{3}, 73, 0.1, 2.0)};
            },
        .fn =
            [](const In& in) {
              Tensor rm = in[0].clone(), rv = in[1].clone();
              ops::update_running_stats(rm, rv, in[2], in[3], 5, 0.1);
              return In{rm, rv};
            },
        .check_forward =
            [](const In& in, const In& out) {
              for (int64_t c = 0; c < 3; ++c) {
                CHECK(std::abs(out[0].at({c}) - (0.9 * in[0].at({c}) + 0.1 * in[2].at({c}))) <
                      1e-14);
                CHECK(std::abs(out[1].at({c}) -
                               (0.9 * in[1].at({c}) + 0.1 * in[3].at({c}) * 5.0 / 4.0)) < 1e-14);
              }
            },
        .check_grad = false,
    },
});

}  // namespace
}  // namespace gpipe::testing
