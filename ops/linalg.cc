// matmul: validates shapes, folds a's batch axes into rows when b is a shared
// 2-D matrix (one large GEMM instead of many small ones), and differentiates
// with the four transpose cases written out in Note [Matmul gradients].
#include "ops/linalg.h"

#include "core/precision.h"
#include "ops/common.h"
#include "ops/elementwise.h"
#include "ops/linalg_kernels.h"
#include "ops/shape.h"

namespace gpipe::ops {
namespace {

// Note [Matmul gradients]: with C = op(A) op(B) and upstream G,
//   dL/dop(A) = G op(B)^T,  dL/dop(B) = op(A)^T G,
// and a transposed operand's gradient is the transpose of that, which folds
// into the flags of one more matmul per operand.
Tensor grad_a(const Tensor& g, const Tensor& a, const Tensor& b, bool ta, bool tb) {
  if (!ta) return matmul(g, b, false, !tb);
  if (b.rank() == 2 && g.rank() > 2) return transpose(matmul(g, b, false, !tb), -1, -2);
  return matmul(b, g, tb, true);
}
Tensor grad_b(const Tensor& g, const Tensor& a, const Tensor& b, bool ta, bool tb) {
  if (!tb) return matmul(a, g, !ta, false);
  return matmul(g, a, true, ta);
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  // Note [bfloat16 products]: bfloat16 operands give a float32 product
  // (every product exact, sums in float32). Their gradients are bfloat16,
  // computed as bfloat16 products of the float32 upstream gradient rounded
  // to bfloat16, as mixed precision does elsewhere.
  const bool half = a.defined() && b.defined() && a.dtype() == DType::kBFloat16;
  if (!half) {
    detail::check_floating("matmul", a, "the first operand");
    detail::check_floating("matmul", b, "the second operand");
  }
  detail::check_same_dtype_device("matmul", {a, b});
  GPIPE_CHECK(a.rank() >= 2 && b.rank() >= 2, "matmul: operands need rank >= 2, got shapes ",
              a.shape(), " and ", b.shape());
  const int64_t ra = a.rank(), rb = b.rank();
  GemmShape s;
  s.ta = ta;
  s.tb = tb;
  s.m = ta ? a.shape()[ra - 1] : a.shape()[ra - 2];
  const int64_t ka = ta ? a.shape()[ra - 2] : a.shape()[ra - 1];
  const int64_t kb = tb ? b.shape()[rb - 1] : b.shape()[rb - 2];
  s.n = tb ? b.shape()[rb - 2] : b.shape()[rb - 1];
  GPIPE_CHECK(ka == kb, "matmul: inner sizes differ: ", a.shape(), ta ? "^T" : "", " @ ", b.shape(),
              tb ? "^T" : "", " (", ka, " vs ", kb, ")");
  s.k = ka;
  std::vector<int64_t> out_dims(a.shape().begin(), a.shape().end() - 2);
  if (rb > 2) {
    GPIPE_CHECK(ra == rb && std::equal(a.shape().begin(), a.shape().end() - 2, b.shape().begin()),
                "matmul: batch axes differ: ", a.shape(), " @ ", b.shape(),
                " (b must be 2-D or have the same leading axes as a)");
  }
  s.batch = 1;
  for (int64_t d : out_dims) s.batch *= d;
  s.b_shared = rb == 2;
  out_dims.push_back(s.m);
  out_dims.push_back(s.n);
  if (s.b_shared && !ta && s.batch > 1) {  // fold batch into rows: one GEMM
    s.m *= s.batch;
    s.batch = 1;
  }
  Tensor out = Tensor::empty(Shape(out_dims), half ? DType::kFloat32 : a.dtype(), a.device());
  batched_gemm(a.device(), s, detail::dense(a), detail::dense(b), out);
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  record_split("matmul", {a, b}, out,
               [ad = a.detach(), bd = b.detach(), ta, tb, need_a, need_b, half](
                   const std::vector<Tensor>& grads, const std::vector<bool>& wanted) {
                 // The operands' dtype: the upstream gradient rounded to it, and the
                 // (float32) products of a bfloat16 matmul rounded back to it.
                 const Tensor gin = half ? cast(grads[0], DType::kBFloat16) : grads[0];
                 auto own = [&](const Tensor& t) {
                   return half && t.defined() ? cast(t, DType::kBFloat16) : t;
                 };
                 Tensor ga = need_a && wanted[0] ? own(grad_a(gin, ad, bd, ta, tb)) : Tensor();
                 Tensor gb;
                 if (need_b && wanted[1]) {
                   if (bd.rank() == 2 && ad.rank() > 2) {
                     // b was shared across a's batch: fold the batch into the product's k.
                     Tensor a2 = reshape(ta ? transpose(ad, -1, -2) : ad,
                                         {-1, ta ? ad.size(-2) : ad.size(-1)});
                     Tensor g2 = reshape(gin, {-1, gin.size(-1)});
                     gb = tb ? matmul(g2, a2, true, false) : matmul(a2, g2, true, false);
                   } else {
                     gb = grad_b(gin, ad, bd, ta, tb);
                   }
                   gb = own(gb);
                 }
                 return std::vector<Tensor>{ga, gb};
               });
  return out;
}

namespace {
// A matrix product's operand at the thread's precision (Note [Mixed
// precision] in core/precision.h): bfloat16 operands for a bfloat16 product;
// float16 ones rounded to float16 and widened back (float32 products).
Tensor product_operand(const Tensor& t) {
  if (current_precision() == Precision::kBFloat16 && t.dtype() == DType::kFloat32)
    return cast(t, DType::kBFloat16);
  return detail::rounded_operand(t);
}
}  // namespace

Tensor linear(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias,
              FusedActivation act) {
  detail::check_rank("linear", weight_in, 2, "weight [out, in]");
  GPIPE_CHECK(x_in.rank() >= 1 && x_in.size(-1) == weight_in.size(1), "linear: input ",
              x_in.shape(), " does not match weight ", weight_in.shape(), " (expected last axis ",
              weight_in.size(1), ")");
  const Tensor x = product_operand(x_in), weight = product_operand(weight_in);
  Tensor y = x.rank() == 1
                 ? reshape(matmul(reshape(x, {1, -1}), weight, false, true), {weight.size(0)})
                 : matmul(x, weight, false, true);
  if (bias.defined())
    GPIPE_CHECK(bias.rank() == 1 && bias.size(0) == weight.size(0), "linear: bias ", bias.shape(),
                " does not match weight ", weight.shape(), " (expected [", weight.size(0), "])");
  // The bias and activation as one fused epilogue pass.
  if (bias.defined() || act != FusedActivation::kNone) y = bias_activation(y, bias, act);
  return y;
}

}  // namespace gpipe::ops
