// Elementwise front functions. Binary ops broadcast by building zero-stride
// views of both operands; their gradients are reduced back to each operand's
// shape with sum_to. Unary ops save what their derivative needs (input or
// output) and call the unary_backward kernel.
#include "ops/elementwise.h"

#include "ops/common.h"
#include "ops/elementwise_kernels.h"
#include "ops/gated.h"
#include "ops/shape.h"

namespace gpipe::ops {
namespace {

const char* binary_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd:
      return "add";
    case BinaryOp::kSub:
      return "sub";
    case BinaryOp::kMul:
      return "mul";
    case BinaryOp::kDiv:
      return "div";
  }
  return "?";
}

Tensor binary_raw(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = binary_name(op);
  detail::check_floating(name, a, "the first operand");
  detail::check_floating(name, b, "the second operand");
  detail::check_same_dtype_device(name, {a, b});
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  NoGradGuard no_grad;
  binary_elementwise(a.device(), op, expand(a, shape), expand(b, shape), out);
  return out;
}

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  if (a.defined() && b.defined() && a.dtype() != b.dtype()) {
    const auto [pa, pb] = detail::promote_pair(a, b);  // a 16-bit operand next to a float32 one
    if (pa.dtype() == pb.dtype()) return binary(op, pa, pb);
  }
  Tensor out = binary_raw(op, a, b);
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  const Shape sa = a.shape(), sb = b.shape();
  switch (op) {
    case BinaryOp::kAdd:
    case BinaryOp::kSub:
      record(binary_name(op), {a, b}, out, [=](const std::vector<Tensor>& g) {
        Tensor ga = need_a ? sum_to(g[0], sa) : Tensor();
        Tensor gb = need_b ? sum_to(op == BinaryOp::kAdd ? g[0] : neg(g[0]), sb) : Tensor();
        return std::vector<Tensor>{ga, gb};
      });
      break;
    case BinaryOp::kMul:
      record("mul", {a, b}, out,
             [=, ad = a.detach(), bd = b.detach()](const std::vector<Tensor>& g) {
               Tensor ga = need_a ? sum_to(mul(g[0], bd), sa) : Tensor();
               Tensor gb = need_b ? sum_to(mul(g[0], ad), sb) : Tensor();
               return std::vector<Tensor>{ga, gb};
             });
      break;
    case BinaryOp::kDiv:
      record("div", {a, b}, out,
             [=, ad = a.detach(), bd = b.detach()](const std::vector<Tensor>& g) {
               Tensor ga = need_a ? sum_to(div(g[0], bd), sa) : Tensor();
               Tensor gb = need_b ? sum_to(neg(div(mul(g[0], ad), mul(bd, bd))), sb) : Tensor();
               return std::vector<Tensor>{ga, gb};
             });
      break;
  }
  return out;
}

// Which value the derivative of `op` reads: the input (x) or the output (y).
bool grad_uses_output(UnaryOp op) {
  return op == UnaryOp::kTanh || op == UnaryOp::kSigmoid || op == UnaryOp::kExp ||
         op == UnaryOp::kSqrt;
}

const char* unary_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::kNeg:
      return "neg";
    case UnaryOp::kRelu:
      return "relu";
    case UnaryOp::kGelu:
      return "gelu";
    case UnaryOp::kTanh:
      return "tanh";
    case UnaryOp::kSigmoid:
      return "sigmoid";
    case UnaryOp::kExp:
      return "exp";
    case UnaryOp::kLog:
      return "log";
    case UnaryOp::kSqrt:
      return "sqrt";
    case UnaryOp::kAbs:
      return "abs";
    case UnaryOp::kPow:
      return "pow";
    case UnaryOp::kAddScalar:
      return "add_scalar";
    case UnaryOp::kMulScalar:
      return "mul_scalar";
  }
  return "?";
}

Tensor unary(UnaryOp op, const Tensor& x, double alpha = 0.0) {
  const char* name = unary_name(op);
  detail::check_floating(name, x, "the input");
  Tensor xd = detail::dense(x);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  unary_elementwise(x.device(), op, alpha, xd, out);
  const bool use_y = grad_uses_output(op);
  Tensor saved = use_y ? out.detach() : xd.detach();
  record(name, {x}, out, [op, alpha, use_y, saved](const std::vector<Tensor>& g) {
    Tensor gy = detail::dense(g[0]);
    Tensor gx = Tensor::empty(gy.shape(), gy.dtype(), gy.device());
    unary_backward(gy.device(), op, alpha, use_y ? Tensor() : saved, use_y ? saved : Tensor(), gy,
                   gx);
    return std::vector<Tensor>{gx};
  });
  return out;
}

}  // namespace

Tensor cast(const Tensor& x, DType dtype) {
  GPIPE_CHECK(x.defined(), "cast: the input is an undefined tensor");
  GPIPE_CHECK(is_float_like(x.dtype()) && is_float_like(dtype), "cast: converts between float32, ",
              "float64, bfloat16 and float16; got ", x.dtype(), " to ", dtype);
  if (x.dtype() == dtype) return x;
  Tensor xd = detail::dense(x);
  Tensor out = Tensor::empty(x.shape(), dtype, x.device());
  cast_into(x.device(), xd, out);
  const DType from = x.dtype();
  record("cast", {x}, out,
         [from](const std::vector<Tensor>& g) { return std::vector<Tensor>{cast(g[0], from)}; });
  return out;
}

Tensor add(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kAdd, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kSub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kMul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kDiv, a, b); }

Tensor add_scalar(const Tensor& x, double s) { return unary(UnaryOp::kAddScalar, x, s); }
Tensor mul_scalar(const Tensor& x, double s) { return unary(UnaryOp::kMulScalar, x, s); }
Tensor neg(const Tensor& x) { return unary(UnaryOp::kNeg, x); }
Tensor pow(const Tensor& x, double exponent) { return unary(UnaryOp::kPow, x, exponent); }
Tensor relu(const Tensor& x) { return unary(UnaryOp::kRelu, x); }
Tensor gelu(const Tensor& x) { return unary(UnaryOp::kGelu, x); }
Tensor tanh(const Tensor& x) { return unary(UnaryOp::kTanh, x); }
Tensor sigmoid(const Tensor& x) { return unary(UnaryOp::kSigmoid, x); }
Tensor exp(const Tensor& x) { return unary(UnaryOp::kExp, x); }
Tensor log(const Tensor& x) { return unary(UnaryOp::kLog, x); }
Tensor sqrt(const Tensor& x) { return unary(UnaryOp::kSqrt, x); }
Tensor abs(const Tensor& x) { return unary(UnaryOp::kAbs, x); }

namespace {
Tensor activation_of(const Tensor& u, FusedActivation act) {
  switch (act) {
    case FusedActivation::kRelu:
      return relu(u);
    case FusedActivation::kGelu:
      return gelu(u);
    case FusedActivation::kTanh:
      return tanh(u);
    case FusedActivation::kSigmoid:
      return sigmoid(u);
    case FusedActivation::kGeluTanh:
      return gelu_tanh_composed(u);
    case FusedActivation::kSilu:
      return silu_composed(u);
    case FusedActivation::kNone:
      break;
  }
  return u;
}
}  // namespace

// Where a device has no fused kernel (CUDA). A 16-bit z beside a float32
// bias computes in float32 (the add widens z) and is rounded once at the
// end, so the result has z's dtype, as the fused kernel's does.
Tensor bias_activation_composed(const Tensor& z, const Tensor& bias, FusedActivation act) {
  const Tensor y = activation_of(bias.defined() ? add(z, bias) : z, act);
  return is_half(z.dtype()) && y.dtype() != z.dtype() ? cast(y, z.dtype()) : y;
}

Tensor bias_activation(const Tensor& z, const Tensor& bias, FusedActivation act) {
  detail::check_floating("bias_activation", z, "the input");
  GPIPE_CHECK(z.rank() >= 1, "bias_activation: the input needs at least one axis, got a scalar");
  if (bias.defined()) {
    GPIPE_CHECK(bias.rank() == 1 && bias.size(0) == z.size(-1), "bias_activation: bias ",
                bias.shape(), " does not match the input's last axis (expected [", z.size(-1),
                "], input ", z.shape(), ")");
    detail::check_params_match("bias_activation", z, {{"bias", bias}});
  }
  const Device dev = z.device();
  if (!bias_act_forward.has(dev.type) || !bias_act_backward.has(dev.type))
    return bias_activation_composed(z, bias, act);
  const Tensor zd = detail::dense(z);
  const Tensor bd = bias.defined() ? detail::dense(bias) : Tensor();
  Tensor y = Tensor::empty(z.shape(), z.dtype(), dev);
  bias_act_forward(dev, act, zd, bd, y);
  // The GELUs' and SiLU's derivatives need their argument, relu/tanh/sigmoid's the output, none's
  // nothing.
  const bool keeps_input = derivative_from_input(act);
  const bool keeps_output = !keeps_input && act != FusedActivation::kNone;
  std::vector<Tensor> inputs{z};
  if (bias.defined()) inputs.push_back(bias);
  // Not split (Note [Split backward]): the bias's gradient is a cheap
  // reduction, computed with the input's so that nothing is kept for W.
  record("bias_activation", inputs, y,
         [act, has_bias = bias.defined(), bias_dtype = bias.defined() ? bias.dtype() : z.dtype(),
          zs = keeps_input ? zd.detach() : Tensor(),
          bs = keeps_input && bd.defined() ? bd.detach() : Tensor(),
          ys = keeps_output ? y.detach() : Tensor()](const std::vector<Tensor>& g) {
           const Tensor gy = detail::dense(g[0]);
           Tensor gb =
               has_bias ? Tensor::empty(Shape{gy.size(-1)}, bias_dtype, gy.device()) : Tensor();
           // Without an activation gz is g itself; the kernel then only sums the bias gradient.
           Tensor gz = act == FusedActivation::kNone
                           ? Tensor()
                           : Tensor::empty(gy.shape(), gy.dtype(), gy.device());
           if (gz.defined() || gb.defined())
             bias_act_backward(gy.device(), act, zs, bs, ys, gy, gz, gb);
           std::vector<Tensor> out{gz.defined() ? gz : gy};
           if (has_bias) out.push_back(gb);
           return out;
         });
  return y;
}

}  // namespace gpipe::ops
