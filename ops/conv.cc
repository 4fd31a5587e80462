// conv2d: validation, output allocation and the hand-written backward.
// The kernels (ops/cpu/conv.cc) do the arithmetic; backward calls them through
// their slots so another device kind only has to register kernels.
#include "ops/conv.h"

#include "core/autograd.h"
#include "core/precision.h"
#include "ops/common.h"
#include "ops/conv_kernels.h"
#include "ops/elementwise.h"

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

// The checks every conv2d makes; returns the kernels' parameters and the output shape.
Conv2dParams check_conv(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const Conv2dOptions& opt, Shape& y_shape) {
  detail::check_floating("conv2d", x, "input");
  detail::check_floating("conv2d", weight, "weight");
  detail::check_params_match("conv2d", x, {{"weight", weight}, {"bias", bias}});
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
  y_shape = Shape{n, o, oh, ow};
  return Conv2dParams{opt.stride[0],
                      opt.stride[1],
                      opt.padding[0],
                      opt.padding[1],
                      opt.dilation[0],
                      opt.dilation[1],
                      g};
}

// Note [16-bit convolution] (the kernels' side is in ops/cpu/conv.cc). Under
// bf16 precision a one-group convolution on the CPU multiplies bfloat16
// operands, as the 16-bit linear does (Note [16-bit linear] in
// ops/linalg.cc): x rounded by a differentiable cast, the float32 master
// weight rounded again in forward and in backward (never kept), float32
// sums into a float32 y. The input gradient is the bfloat16 product of the
// upstream gradient rounded to bfloat16, returned as bfloat16 through the
// cast; the weight gradient is that product's float32 result; the bias
// gradient sums the float32 upstream gradient. CUDA takes every group
// count, with bfloat16 cuDNN graphs (Note [16-bit convolution on CUDA] in
// ops/cuda/conv.cc); grouped CPU convolutions and fp16 round the operands
// and convolve in float32.
Tensor conv2d_bf16(const Tensor& x_in, const Tensor& weight, const Tensor& bias,
                   const Conv2dParams& params, const Shape& y_shape) {
  const Tensor xh = cast(x_in, DType::kBFloat16);
  const Tensor bd = bias.defined() ? detail::dense(bias) : Tensor();
  Tensor y = Tensor::empty(y_shape, DType::kFloat32, x_in.device());
  {
    NoGradGuard no_grad;
    conv2d_forward(x_in.device(), detail::dense(xh), cast(weight, DType::kBFloat16), bd, params, y);
  }
  const bool need_x = xh.requires_grad(), need_w = weight.requires_grad();
  const bool need_b = bias.defined() && bias.requires_grad();
  record_split("conv2d_bf16", {xh, weight, bias}, y,
               [xs = need_w ? detail::dense(xh).detach() : Tensor(),
                wd = need_x ? weight.detach() : Tensor(), x_shape = x_in.shape(),
                w_shape = weight.shape(), params, need_x, need_w,
                need_b](const std::vector<Tensor>& grads, const std::vector<bool>& wanted) {
                 NoGradGuard no_grad;
                 const Tensor gy = detail::dense(grads[0]);
                 const Tensor gh = (need_x && wanted[0]) || (need_w && wanted[1])
                                       ? cast(gy, DType::kBFloat16)
                                       : Tensor();
                 Tensor gx, gw, gb;
                 if (need_x && wanted[0]) {
                   Tensor g32 = Tensor::empty(x_shape, DType::kFloat32, gy.device());
                   conv2d_backward_input(gy.device(), gh, cast(wd, DType::kBFloat16), params, g32);
                   gx = cast(g32, DType::kBFloat16);
                 }
                 if (need_w && wanted[1]) {
                   gw = Tensor::empty(w_shape, DType::kFloat32, gy.device());
                   conv2d_backward_weight(gy.device(), gh, xs, params, gw);
                 }
                 if (need_b && wanted[2]) {
                   gb = Tensor::empty(Shape{w_shape[0]}, DType::kFloat32, gy.device());
                   conv2d_backward_bias(gy.device(), gy, gb);
                 }
                 return std::vector<Tensor>{gx, gw, gb};
               });
  return y;
}

}  // namespace

Tensor conv2d(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias,
              const Conv2dOptions& opt) {
  Shape y_shape;
  const bool half_in = x_in.defined() && is_half(x_in.dtype());
  if (current_precision() == Precision::kBFloat16 && x_in.defined() && weight_in.defined() &&
      (x_in.dtype() == DType::kFloat32 || x_in.dtype() == DType::kBFloat16) &&
      weight_in.dtype() == DType::kFloat32 &&
      (!bias.defined() || bias.dtype() == DType::kFloat32) &&
      (opt.groups == 1 || x_in.device().is_cuda())) {
    const Conv2dParams params = check_conv(x_in, weight_in, bias, opt, y_shape);
    const Tensor y = conv2d_bf16(x_in, weight_in, bias, params, y_shape);
    return half_in ? cast(y, x_in.dtype()) : y;  // Note [16-bit activations]: 16 in, 16 out
  }
  // Any other 16-bit input (outside bf16 precision, a 16-bit weight,
  // several groups on the CPU, fp16): float32 on the widened values,
  // rounded once.
  if (half_in) {
    auto wide = [](const Tensor& t) {
      return t.defined() && is_half(t.dtype()) ? cast(t, DType::kFloat32) : t;
    };
    return cast(conv2d(wide(x_in), wide(weight_in), wide(bias), opt), x_in.dtype());
  }
  // Otherwise, under bf16 / fp16 precision the operands are rounded to 16
  // bits and the products and sums stay float32.
  const Tensor x = detail::rounded_operand(x_in), weight = detail::rounded_operand(weight_in);
  const Conv2dParams params = check_conv(x, weight, bias, opt, y_shape);
  const Tensor xd = detail::dense(x), wd = detail::dense(weight);
  const Tensor bd = bias.defined() ? detail::dense(bias) : Tensor();
  Tensor y = Tensor::empty(y_shape, x.dtype(), x.device());
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
