// Op-table cases for max_pool2d, avg_pool2d (with and without
// count_include_pad) and global_avg_pool2d. References are direct window
// loops. Random inputs are distinct, so max pooling's gradient is smooth at them.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <string>

#include "ops/pool.h"
#include "tests/ops/op_table.h"

namespace gpipe::testing {
namespace {

using In = std::vector<Tensor>;

enum class Kind { kMax, kAvg };

Tensor ref_pool2d(const Tensor& x, const ops::Pool2dOptions& o, Kind kind) {
  const auto xv = x.to_vector<double>();
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  const auto& k = o.kernel;
  const auto& s = o.stride;
  const auto& p = o.padding;
  const int64_t oh = (h + 2 * p[0] - k[0]) / s[0] + 1, ow = (w + 2 * p[1] - k[1]) / s[1] + 1;
  std::vector<double> y;
  for (int64_t plane = 0; plane < n * c; ++plane)
    for (int64_t r = 0; r < oh; ++r)
      for (int64_t q = 0; q < ow; ++q) {
        double best = -std::numeric_limits<double>::infinity(), sum = 0;
        int64_t in_bounds = 0, padded = 0;
        for (int64_t i = 0; i < k[0]; ++i)
          for (int64_t j = 0; j < k[1]; ++j) {
            const int64_t ih = r * s[0] - p[0] + i, iw = q * s[1] - p[1] + j;
            // PyTorch's divisor counts positions inside the padded input.
            if (ih < h + p[0] && iw < w + p[1]) ++padded;
            if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
            const double v = xv[(plane * h + ih) * w + iw];
            best = std::max(best, v);
            sum += v;
            ++in_bounds;
          }
        if (kind == Kind::kMax)
          y.push_back(best);
        else
          y.push_back(sum / static_cast<double>(o.count_include_pad ? padded : in_bounds));
      }
  return Tensor::from_vector(y, Shape{n, c, oh, ow});
}

OpCase pool_case(std::string name, Kind kind, Shape x_shape, ops::Pool2dOptions opt,
                 uint64_t seed) {
  const bool is_max = kind == Kind::kMax;
  return OpCase{
      .name = std::string(is_max ? "max_pool2d/" : "avg_pool2d/") + name,
      .covers = is_max ? std::vector<std::string>{"max_pool2d_forward", "max_pool2d_backward"}
                       : std::vector<std::string>{"avg_pool2d_forward", "avg_pool2d_backward"},
      .make_inputs = [=] { return In{rand64(x_shape, seed)}; },
      .fn =
          [=](const In& in) {
            return In{is_max ? ops::max_pool2d(in[0], opt) : ops::avg_pool2d(in[0], opt)};
          },
      .check_forward =
          [=](const In& in, const In& out) {
            const Tensor ref = ref_pool2d(in[0], opt, kind);
            REQUIRE(out[0].shape() == ref.shape());
            CHECK(max_abs_diff(out[0], ref) < 1e-12);
          },
  };
}

ops::Pool2dOptions pool(std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride,
                        std::array<int64_t, 2> padding, bool count_include_pad = true) {
  return ops::Pool2dOptions{kernel, stride, padding, count_include_pad};
}

GPIPE_OP_CASES({
    pool_case("3x3_s1_p1", Kind::kMax, Shape{2, 3, 5, 5}, pool({3, 3}, {1, 1}, {1, 1}), 1),
    pool_case("2x2_s2", Kind::kMax, Shape{2, 2, 6, 6}, pool({2, 2}, {2, 2}, {0, 0}), 2),
    pool_case("2x2_s2_odd_input", Kind::kMax, Shape{1, 2, 5, 7}, pool({2, 2}, {2, 2}, {0, 0}), 3),
    pool_case("3x3_s2_p1", Kind::kMax, Shape{1, 2, 7, 6}, pool({3, 3}, {2, 2}, {1, 1}), 4),
    pool_case("3x2_s2x1_p1x0", Kind::kMax, Shape{1, 2, 6, 5}, pool({3, 2}, {2, 1}, {1, 0}), 5),
    pool_case("3x3_s1_p1_include_pad", Kind::kAvg, Shape{2, 3, 5, 5}, pool({3, 3}, {1, 1}, {1, 1}),
              6),
    pool_case("3x3_s1_p1_exclude_pad", Kind::kAvg, Shape{2, 3, 5, 5},
              pool({3, 3}, {1, 1}, {1, 1}, false), 7),
    pool_case("3x3_s2_p1_include_pad", Kind::kAvg, Shape{1, 2, 6, 6}, pool({3, 3}, {2, 2}, {1, 1}),
              8),
    pool_case("3x3_s2_p1_exclude_pad", Kind::kAvg, Shape{1, 2, 6, 6},
              pool({3, 3}, {2, 2}, {1, 1}, false), 9),
    pool_case("2x2_s2", Kind::kAvg, Shape{2, 2, 4, 6}, pool({2, 2}, {2, 2}, {0, 0}), 10),
    pool_case("3x2_s1x2_p1x1", Kind::kAvg, Shape{1, 2, 5, 5}, pool({3, 2}, {1, 2}, {1, 1}), 11),
    OpCase{
        .name = "global_avg_pool2d",
        .covers = {},
        .make_inputs =
            [] {
              return In{rand64(Shape{2, 3, 4, 5}, 12)};
            },
        .fn = [](const In& in) { return In{ops::global_avg_pool2d(in[0])}; },
        .check_forward =
            [](const In& in, const In& out) {
              REQUIRE(out[0].shape() == Shape{2, 3});
              for (int64_t n = 0; n < 2; ++n)
                for (int64_t c = 0; c < 3; ++c) {
                  double s = 0;
                  for (int64_t i = 0; i < 4; ++i)
                    for (int64_t j = 0; j < 5; ++j) s += in[0].at({n, c, i, j});
                  CHECK(std::abs(out[0].at({n, c}) - s / 20) < 1e-12);
                }
            },
    },
});

}  // namespace
}  // namespace gpipe::testing
