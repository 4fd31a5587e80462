// Op-table cases for conv2d: plain 3x3, stride + padding, dilation, groups,
// depthwise (both with and without a channel multiplier), pointwise 1x1,
// 1x7 / 7x1 kernels, and no bias. The reference is a direct seven-deep loop.
#include <catch2/catch.hpp>
#include <string>

#include "ops/conv.h"
#include "tests/ops/op_table.h"

namespace gpipe::testing {
namespace {

using In = std::vector<Tensor>;

// Direct convolution: y[n,o,r,q] = b[o] + sum_{ci,i,j} x[n, g*Cg+ci, r*s - p + i*d, ...] *
// w[o,ci,i,j].
Tensor ref_conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const ops::Conv2dOptions& o) {
  const auto xv = x.to_vector<double>(), wv = w.to_vector<double>();
  const std::vector<double> bv = b.defined() ? b.to_vector<double>() : std::vector<double>();
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), wd = x.size(3);
  const int64_t oc = w.size(0), cg = w.size(1), kh = w.size(2), kw = w.size(3);
  const int64_t og = oc / o.groups;
  const int64_t oh = (h + 2 * o.padding[0] - o.dilation[0] * (kh - 1) - 1) / o.stride[0] + 1;
  const int64_t ow = (wd + 2 * o.padding[1] - o.dilation[1] * (kw - 1) - 1) / o.stride[1] + 1;
  std::vector<double> y(n * oc * oh * ow, 0.0);
  for (int64_t s = 0; s < n; ++s)
    for (int64_t f = 0; f < oc; ++f)
      for (int64_t r = 0; r < oh; ++r)
        for (int64_t q = 0; q < ow; ++q) {
          double acc = bv.empty() ? 0.0 : bv[f];
          for (int64_t ci = 0; ci < cg; ++ci) {
            const int64_t ch = (f / og) * cg + ci;
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t ih = r * o.stride[0] - o.padding[0] + i * o.dilation[0];
                const int64_t iw = q * o.stride[1] - o.padding[1] + j * o.dilation[1];
                if (ih < 0 || ih >= h || iw < 0 || iw >= wd) continue;
                acc +=
                    xv[((s * c + ch) * h + ih) * wd + iw] * wv[((f * cg + ci) * kh + i) * kw + j];
              }
          }
          y[((s * oc + f) * oh + r) * ow + q] = acc;
        }
  return Tensor::from_vector(y, Shape{n, oc, oh, ow});
}

OpCase conv_case(std::string name, Shape x_shape, Shape w_shape, bool bias, ops::Conv2dOptions opt,
                 uint64_t seed) {
  std::vector<std::string> covers = {"conv2d_forward", "conv2d_backward_input",
                                     "conv2d_backward_weight"};
  if (bias) covers.push_back("conv2d_backward_bias");
  const int64_t out_channels = w_shape[0];
  return OpCase{
      .name = "conv2d/" + name,
      .covers = covers,
      .make_inputs =
          [=] {
            In in{rand64(x_shape, seed), rand64(w_shape, seed + 1)};
            if (bias) in.push_back(rand64(Shape{out_channels}, seed + 2));
            return in;
          },
      .fn =
          [=](const In& in) { return In{ops::conv2d(in[0], in[1], bias ? in[2] : Tensor(), opt)}; },
      .check_forward =
          [=](const In& in, const In& out) {
            const Tensor ref = ref_conv2d(in[0], in[1], bias ? in[2] : Tensor(), opt);
            REQUIRE(out[0].shape() == ref.shape());
            CHECK(max_abs_diff(out[0], ref) < 1e-12);
          },
  };
}

ops::Conv2dOptions options(std::array<int64_t, 2> stride, std::array<int64_t, 2> padding,
                           std::array<int64_t, 2> dilation = {1, 1}, int64_t groups = 1) {
  return ops::Conv2dOptions{stride, padding, dilation, groups};
}

GPIPE_OP_CASES({
    conv_case("basic_3x3", Shape{2, 3, 5, 5}, Shape{4, 3, 3, 3}, true, {}, 10),
    conv_case("stride2_pad1", Shape{2, 3, 7, 6}, Shape{4, 3, 3, 3}, true, options({2, 2}, {1, 1}),
              20),
    conv_case("stride_2x1_pad_0x1", Shape{1, 2, 6, 5}, Shape{3, 2, 3, 2}, true,
              options({2, 1}, {0, 1}), 25),
    conv_case("dilation2", Shape{1, 2, 7, 7}, Shape{3, 2, 3, 3}, true,
              options({1, 1}, {2, 2}, {2, 2}), 30),
    conv_case("dilation_2x1_stride2", Shape{2, 2, 8, 6}, Shape{2, 2, 2, 3}, true,
              options({2, 2}, {1, 1}, {2, 1}), 35),
    conv_case("groups2", Shape{2, 4, 5, 5}, Shape{6, 2, 3, 3}, true,
              options({1, 1}, {1, 1}, {1, 1}, 2), 40),
    conv_case("depthwise", Shape{2, 3, 6, 6}, Shape{3, 1, 3, 3}, true,
              options({1, 1}, {1, 1}, {1, 1}, 3), 50),
    conv_case("depthwise_stride2", Shape{2, 3, 7, 6}, Shape{3, 1, 3, 3}, false,
              options({2, 2}, {1, 1}, {1, 1}, 3), 55),
    conv_case("depthwise_multiplier2_dilated", Shape{1, 2, 7, 6}, Shape{4, 1, 3, 3}, true,
              options({1, 2}, {2, 2}, {2, 2}, 2), 60),
    conv_case("depthwise_5x5_pad2", Shape{1, 4, 6, 6}, Shape{4, 1, 5, 5}, true,
              options({1, 1}, {2, 2}, {1, 1}, 4), 65),
    conv_case("pointwise_1x1", Shape{2, 4, 3, 3}, Shape{5, 4, 1, 1}, true, {}, 70),
    conv_case("pointwise_1x1_groups2", Shape{2, 4, 3, 2}, Shape{6, 2, 1, 1}, true,
              options({1, 1}, {0, 0}, {1, 1}, 2), 75),
    conv_case("1x1_stride2", Shape{1, 3, 5, 5}, Shape{2, 3, 1, 1}, true, options({2, 2}, {0, 0}),
              80),
    conv_case("1x7_pad_0x3", Shape{1, 2, 4, 9}, Shape{3, 2, 1, 7}, true, options({1, 1}, {0, 3}),
              90),
    conv_case("7x1_pad_3x0", Shape{1, 2, 9, 4}, Shape{3, 2, 7, 1}, true, options({1, 1}, {3, 0}),
              95),
    conv_case("no_bias", Shape{2, 3, 5, 4}, Shape{2, 3, 3, 3}, false, options({1, 1}, {1, 1}), 100),
    conv_case("kernel_covers_input", Shape{2, 2, 3, 3}, Shape{3, 2, 3, 3}, true, {}, 110),
});

}  // namespace
}  // namespace gpipe::testing
