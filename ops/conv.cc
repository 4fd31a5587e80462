// conv2d: validation, output allocation and the hand-written backward.
// The kernels (ops/cpu/conv.cc) do the arithmetic; backward calls them through
// their slots so another device kind only has to register kernels.
#include "ops/conv.h"

#include "core/autograd.h"
#include "ops/common.h"
#include "ops/conv_kernels.h"

namespace gpipe::ops {
namespace {

void check_options(const Conv2dOptions& opt) {
  for (int a = 0; a < 2; ++a) {
    GPIPE_CHECK(opt.stride[a] > 0, "conv2d: stride must be positive, got [", opt.stride[0], ", ",
                opt.stride[1], "]");
    GPIPE_CHECK(opt.dilation[a] > 0, "conv2d: dilation must be positive, got [", opt.dilation[0],
                ", ", opt.dilation[1], "]");
    GPIPE_CHECK(opt.padding[a] >= 0, "conv2d: padding must be non-negative, got [", opt.padding[0],
                ", ", opt.padding[1], "]");
  }
  GPIPE_CHECK(opt.groups > 0, "conv2d: groups must be positive, got ", opt.groups);
}

// Output extent along one axis (may be <= 0 for a too-small input).
int64_t out_extent(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil) {
  const int64_t span = in + 2 * pad - dil * (k - 1) - 1;
  return span < 0 ? 0 : span / stride + 1;
}

}  // namespace

Tensor conv2d(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias,
              const Conv2dOptions& opt) {
  // Under bf16 / fp16 precision the operands are rounded to 16 bits; the
  // products and sums stay float32 (no 16-bit convolution kernel yet).
  const Tensor x = detail::rounded_operand(x_in), weight = detail::rounded_operand(weight_in);
  detail::check_floating("conv2d", x, "input");
  detail::check_floating("conv2d", weight, "weight");
  detail::check_same_dtype_device("conv2d", {x, weight, bias});
  GPIPE_CHECK(x.rank() == 4, "conv2d: expected input [N, C, H, W] of rank 4, got shape ",
              x.shape());
  GPIPE_CHECK(weight.rank() == 4, "conv2d: expected weight [out, in/groups, kh, kw] of rank 4, ",
              "got shape ", weight.shape());
  check_options(opt);

  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  const int64_t o = weight.size(0), kh = weight.size(2), kw = weight.size(3);
  const int64_t g = opt.groups;
  GPIPE_CHECK(c % g == 0, "conv2d: input channels ", c, " are not divisible by groups ", g);
  GPIPE_CHECK(o % g == 0, "conv2d: output channels ", o, " are not divisible by groups ", g);
  GPIPE_CHECK(weight.size(1) == c / g, "conv2d: expected weight [out, in/groups, kh, kw] = [", o,
              ", ", c / g, ", ", kh, ", ", kw, "], got ", weight.shape(), " (input ", x.shape(),
              ", groups ", g, ")");
  GPIPE_CHECK(kh > 0 && kw > 0, "conv2d: kernel must be non-empty, got weight ", weight.shape());
  if (bias.defined()) {
    detail::check_floating("conv2d", bias, "bias");
    GPIPE_CHECK(bias.rank() == 1 && bias.size(0) == o, "conv2d: expected bias [", o, "], got ",
                bias.shape());
  }
  const int64_t oh = out_extent(h, kh, opt.stride[0], opt.padding[0], opt.dilation[0]);
  const int64_t ow = out_extent(w, kw, opt.stride[1], opt.padding[1], opt.dilation[1]);
  GPIPE_CHECK(oh >= 1 && ow >= 1, "conv2d: output size would be [", oh, ", ", ow, "]: input ",
              x.shape(), " with kernel [", kh, ", ", kw, "], padding [", opt.padding[0], ", ",
              opt.padding[1], "], dilation [", opt.dilation[0], ", ", opt.dilation[1],
              "] is too small");

  const Conv2dParams params{opt.stride[0],
                            opt.stride[1],
                            opt.padding[0],
                            opt.padding[1],
                            opt.dilation[0],
                            opt.dilation[1],
                            g};
  const Tensor xd = detail::dense(x), wd = detail::dense(weight);
  const Tensor bd = bias.defined() ? detail::dense(bias) : Tensor();
  Tensor y = Tensor::empty(Shape{n, o, oh, ow}, x.dtype(), x.device());
  conv2d_forward(x.device(), xd, wd, bd, params, y);

  const bool need_x = x.requires_grad();
  const bool need_w = weight.requires_grad();
  const bool need_b = bias.defined() && bias.requires_grad();
  // Saved inputs are only those a gradient needs: grad_x needs weight,
  // grad_weight needs x.
  record_split("conv2d", {x, weight, bias}, y,
               [xs = need_w ? xd.detach() : Tensor(), ws = need_x ? wd.detach() : Tensor(),
                x_shape = x.shape(), w_shape = weight.shape(), params, need_x, need_w,
                need_b](const std::vector<Tensor>& grads, const std::vector<bool>& wanted) {
                 const Tensor gy = detail::dense(grads[0]);
                 Tensor gx, gw, gb;
                 if (need_x && wanted[0]) {
                   gx = Tensor::empty(x_shape, gy.dtype(), gy.device());
                   conv2d_backward_input(gy.device(), gy, ws, params, gx);
                 }
                 if (need_w && wanted[1]) {
                   gw = Tensor::empty(w_shape, gy.dtype(), gy.device());
                   conv2d_backward_weight(gy.device(), gy, xs, params, gw);
                 }
                 if (need_b && wanted[2]) {
                   gb = Tensor::empty(Shape{w_shape[0]}, gy.dtype(), gy.device());
                   conv2d_backward_bias(gy.device(), gy, gb);
                 }
                 return std::vector<Tensor>{gx, gw, gb};
               });
  return y;
}

}  // namespace gpipe::ops
