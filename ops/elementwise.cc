// Elementwise front functions. Binary ops broadcast by building zero-stride
// views of both operands; their gradients are reduced back to each operand's
// shape with sum_to. Unary ops save what their derivative needs (input or
// output) and call the unary_backward kernel.
#include "ops/elementwise.h"

#include "ops/common.h"
#include "ops/elementwise_kernels.h"
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

}  // namespace gpipe::ops
