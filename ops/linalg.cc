// matmul: validates shapes, folds a's batch axes into rows when b is a shared
// 2-D matrix (one large GEMM instead of many small ones), and differentiates
// with the four transpose cases written out in Note [Matmul gradients].
#include "ops/linalg.h"

#include "core/precision.h"
#include "core/rng.h"
#include "ops/common.h"
#include "ops/dropout.h"
#include "ops/dropout_kernels.h"
#include "ops/elementwise.h"
#include "ops/elementwise_kernels.h"
#include "ops/linalg_kernels.h"
#include "ops/shape.h"
#include "ops/weight_cast.h"

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

void timed_gemm(const GemmShape& s, const Tensor& a, const Tensor& b, Tensor& c) {
  kernel_profile::detailed(
      "batched_gemm", [&] { batched_gemm(a.device(), s, a, b, c); },
      [&] {
        return gpipe::detail::concat(
            s.ta ? "A^T*" : "A*", s.tb ? "B^T " : "B ", dtype_name(a.dtype()), " ",
            s.batch > 1 ? gpipe::detail::concat(s.batch, "x ") : std::string(), s.m, "x", s.n, "x",
            s.k);
      },
      2.0 * static_cast<double>(s.batch) * s.m * s.n * s.k);
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  // Note [bfloat16 products]: bfloat16 operands give a float32 product
  // (every product exact, sums in float32). Their gradients are bfloat16,
  // computed as bfloat16 products of the float32 upstream gradient rounded
  // to bfloat16, as mixed precision does elsewhere.
  // float16 operands are multiplied the same way, on float32 copies where
  // the device has no float16 GEMM (Note [16-bit kernels] in ops/dispatch.h).
  detail::check_floating("matmul", a, "the first operand");
  detail::check_floating("matmul", b, "the second operand");
  if (a.dtype() != b.dtype()) {  // a 16-bit operand next to a float32 one: widened
    const auto [pa, pb] = detail::promote_pair(a, b);
    if (pa.dtype() == pb.dtype()) return matmul(pa, pb, ta, tb);
  }
  const bool half = is_half(a.dtype());
  const DType half_dtype = a.dtype();
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
  timed_gemm(s, detail::dense(a), detail::dense(b), out);
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  record_split(
      "matmul", {a, b}, out,
      [ad = a.detach(), bd = b.detach(), ta, tb, need_a, need_b, half, half_dtype](
          const std::vector<Tensor>& grads, const std::vector<bool>& wanted) {
        // The operands' dtype: the upstream gradient rounded to it, and the
        // (float32) products of a 16-bit matmul rounded back to it.
        const Tensor gin = half ? cast(grads[0], half_dtype) : grads[0];
        auto own = [&](const Tensor& t) { return half && t.defined() ? cast(t, half_dtype) : t; };
        Tensor ga = need_a && wanted[0] ? own(grad_a(gin, ad, bd, ta, tb)) : Tensor();
        Tensor gb;
        if (need_b && wanted[1]) {
          if (bd.rank() == 2 && ad.rank() > 2) {
            // b was shared across a's batch: fold the batch into the product's k.
            Tensor a2 =
                reshape(ta ? transpose(ad, -1, -2) : ad, {-1, ta ? ad.size(-2) : ad.size(-1)});
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

// Note [16-bit linear]. Under bf16 / fp16 precision (Note [Mixed precision]
// in core/precision.h) y = x W^T multiplies 16-bit operands: x rounded to
// the 16-bit format (differentiably: its gradient goes back through the
// casts) and the float32 master weight rounded likewise. The rounded weight
// is not kept for backward by each micro-batch (M micro-batches in flight
// would hold M copies of every weight): inside a pipeline step one rounding
// per weight serves every use (Note [Weight casts]), elsewhere backward
// rounds it again.
// bf16 multiplies bfloat16 tensors with the bfloat16 GEMM; fp16 multiplies
// the float16-rounded values in float32. The input gradient is a 16-bit
// product of the upstream gradient rounded to 16 bits; the weight gradient
// is the float32 result of that product, never rounded.
Tensor rounded(const Tensor& t, bool bf16) {
  return bf16 ? cast(t, DType::kBFloat16) : cast(cast(t, DType::kFloat16), DType::kFloat32);
}

// a [.., k] times b^T [k, n] (tb: b is [n, k]) or b [k, n] as one bfloat16
// result, where the device's GEMM writes bfloat16 itself
// (batched_gemm_bf16_out: CUDA, CPU); undefined elsewhere or for other dtypes.
Tensor product_bf16_out(const Tensor& a, const Tensor& b, bool tb) {
  if (a.dtype() != DType::kBFloat16 || b.dtype() != DType::kBFloat16 ||
      !batched_gemm_bf16_out.has(a.device().type))
    return Tensor();
  const Tensor rows = reshape(a, {-1, a.size(-1)});
  GemmShape s;
  s.tb = tb;
  s.b_shared = true;
  s.m = rows.size(0);
  s.n = tb ? b.size(0) : b.size(1);
  s.k = rows.size(1);
  std::vector<int64_t> dims(a.shape().dims().begin(), a.shape().dims().end());
  dims.back() = s.n;
  Tensor y = Tensor::empty({s.m, s.n}, DType::kBFloat16, a.device());
  const Tensor rd = detail::dense(rows), bd = detail::dense(b);
  kernel_profile::detailed(
      "batched_gemm_bf16_out", [&] { batched_gemm_bf16_out(a.device(), s, rd, bd, y); },
      [&] {
        return gpipe::detail::concat(tb ? "A*B^T " : "A*B ", "bfloat16 ", s.m, "x", s.n, "x", s.k,
                                     " ->bf16");
      },
      2.0 * static_cast<double>(s.m) * s.n * s.k);
  return reshape(y, dims);
}

// x W^T for the 16-bit operands xh, w16, in `out` (float32, or a 16-bit
// dtype: each float32 product rounded once). A device whose GEMM writes
// bfloat16 makes a bfloat16 result in one call (product_bf16_out).
// Elsewhere a large 16-bit result is made a block of rows at a time,
// so its float32 form never exists whole (the vocabulary projection's would
// be twice the 16-bit logits); on a GPU those blocks cost a launch and a
// cast each (about 40% of a bf16 T6 step's GPU time on an H200 before,
// docs/BENCHMARKS.md).
constexpr int64_t kProductBlockBytes = 4 << 20;
Tensor product_16bit(const Tensor& xh, const Tensor& w16, DType out) {
  if (!is_half(out)) return matmul(xh, w16, false, true);
  if (out == DType::kBFloat16) {
    Tensor y = product_bf16_out(xh, w16, true);
    if (y.defined()) return y;
  }
  const Tensor rows = reshape(xh, {-1, xh.size(-1)});
  const int64_t n = rows.size(0), cols = w16.size(0);
  std::vector<int64_t> dims(xh.shape().dims().begin(), xh.shape().dims().end());
  dims.back() = cols;
  const int64_t per = std::max<int64_t>(64, kProductBlockBytes / (4 * std::max<int64_t>(cols, 1)));
  if (n <= per) return cast(matmul(xh, w16, false, true), out);
  Tensor y = Tensor::empty({n, cols}, out, xh.device());
  for (int64_t r0 = 0; r0 < n; r0 += per) {
    const int64_t len = std::min(per, n - r0);
    narrow(y, 0, r0, len).copy_from(cast(matmul(narrow(rows, 0, r0, len), w16, false, true), out));
  }
  return reshape(y, dims);
}

Tensor linear_16bit(const Tensor& x, const Tensor& weight, bool bf16, DType out) {
  const Tensor xh = rounded(x, bf16);
  Tensor y;
  {
    NoGradGuard no_grad;
    y = product_16bit(xh, weight_operand(weight, bf16), out);
  }
  const bool need_x = xh.requires_grad(), need_w = weight.requires_grad();
  record_split(
      "linear_16bit", {xh, weight}, y,
      [xd = xh.detach(), wd = weight.detach(), bf16, need_x, need_w](
          const std::vector<Tensor>& g, const std::vector<bool>& wanted) {
        NoGradGuard no_grad;
        const Tensor gh = rounded(g[0], bf16);
        Tensor gx, gw;
        if (need_x && wanted[0]) {
          const Tensor w16 = weight_operand(wd, bf16);
          if (bf16) gx = product_bf16_out(gh, w16, false);  // one call where the GEMM writes bf16
          if (!gx.defined()) gx = matmul(gh, w16, false, false);
          if (bf16 && gx.dtype() != DType::kBFloat16) gx = cast(gx, DType::kBFloat16);
        }
        if (need_w && wanted[1])
          gw = matmul(reshape(gh, {-1, gh.size(-1)}), reshape(xd, {-1, xd.size(-1)}), true, false);
        return std::vector<Tensor>{gx, gw};
      });
  return y;
}

// Note [Fused linear]. A float32 linear layer with a bias, ReLU, residual
// or training dropout on a device with linear_bias_act (the CPU; CUDA,
// not bit for bit, where linear_bias_act_takes the case: below) runs as one
// GEMM whose epilogue adds the bias, applies the activation and the dropout
// and adds the residual in cache (Note [GEMM epilogue] in
// ops/cpu/gemm_kernels.h), instead of a GEMM and a pass over memory for each.
// It records one node that splits (Note [Split backward]): the dropout's
// mask on g, then gz = g act'(y) (bias_act_backward, which also sums the bias
// gradient), then gx = gz w now, gw = gz^T x and the bias gradient with the
// weights: the kernels and operand orders of the composed matmul +
// bias_activation + dropout + add, so forward and backward have the same
// bits as the composed form. The residual's gradient is the upstream one
// itself, as the add's. A residual after an activation is added separately:
// the backward reads ReLU's mask off the output, which the residual would
// change (a dropout only zeroes where its mask already zeroed g).
//
// The same fusion runs under bf16 precision for a bfloat16 input (Note
// [16-bit linear]) where the device's linear_bias_act takes bfloat16 (the
// CPU): y = round(act(round(x w16^T) + b)) in one GEMM, and one node whose
// backward runs the composed form's kernels in its order: bias_act_backward
// (gz in bfloat16, the bias gradient in float32), then the 16-bit linear's
// gx = gz w16 (bfloat16) and gw = gz^T x (float32). Same bits as
// linear_16bit followed by bias_activation, forward and backward.
//
// A device whose linear_bias_act_takes declines a case (CUDA: a dropout, or
// the pending kernels off) runs the composed form. Where CUDA takes it, the
// forward is one cuBLASLt call (Note [cuBLASLt epilogue] in
// ops/cuda/linear_lt.cc), close to the composed ops rather than their bits,
// and the backward is this node's, the composed kernels.
enum class FusedLinear { kNone, kFloat32, kBFloat16 };
FusedLinear fused_linear_kind(const Tensor& x, const Tensor& weight, const Tensor& bias,
                              FusedActivation act, const Tensor& residual, double dropout) {
  const DeviceType dev = x.device().type;
  const bool fits =
      ((act == FusedActivation::kRelu && !residual.defined()) ||
       (act == FusedActivation::kNone && (bias.defined() || residual.defined() || dropout))) &&
      x.rank() >= 2 && weight.dtype() == DType::kFloat32 &&
      (!bias.defined() || bias.dtype() == DType::kFloat32) && weight.device() == x.device() &&
      (!bias.defined() || bias.device() == x.device()) &&
      (!residual.defined() || (residual.dtype() == x.dtype() && residual.device() == x.device())) &&
      bias_act_backward.has(dev) &&
      (!linear_bias_act_takes.has(dev) ||
       linear_bias_act_takes(x.device(), x.dtype(), act == FusedActivation::kRelu,
                             residual.defined(), dropout));
  const Precision p = current_precision();
  if (fits && x.dtype() == DType::kFloat32 && p == Precision::kFloat32 && linear_bias_act.has(dev))
    return FusedLinear::kFloat32;
  if (fits && x.dtype() == DType::kBFloat16 && p == Precision::kBFloat16 &&
      linear_bias_act.takes_bf16(dev))
    return FusedLinear::kBFloat16;
  return FusedLinear::kNone;
}

// Both fused linears (Note [Fused linear]): float32, or bf16's on a
// bfloat16 input with the weight rounded to bfloat16 and a bfloat16 result
// (and a bfloat16 residual).
Tensor fused_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, FusedActivation act,
                    bool bf16, const Tensor& residual, const FusedDropout& dropout) {
  const int64_t in = weight.size(1), out = weight.size(0);
  const Tensor x2 = detail::dense(reshape(x, {-1, in}));
  const Tensor wd = detail::dense(bf16 ? weight_operand(weight, true) : weight);
  const Tensor bd = bias.defined() ? detail::dense(bias) : Tensor();
  const Tensor rd = residual.defined() ? detail::dense(reshape(residual, {-1, out})) : Tensor();
  const bool relu = act == FusedActivation::kRelu;
  // Note [Fused dropout]. The mask is ops::dropout's: the uniforms of the
  // stream current_rng_context().key(salt) at the output's flat indices,
  // drawn in the epilogue for the tile in cache and again in backward.
  const double p = dropout.p;
  const uint64_t key = p > 0 ? current_rng_context().key(dropout.salt) : 0;
  std::vector<int64_t> dims(x.shape().begin(), x.shape().end() - 1);
  dims.push_back(out);
  Tensor y = Tensor::empty(Shape(dims), bf16 ? DType::kBFloat16 : DType::kFloat32, x.device());
  kernel_profile::detailed(
      "linear_bias_act", [&] { linear_bias_act(x.device(), x2, wd, bd, relu, p, key, rd, y); },
      [&] {
        return gpipe::detail::concat("A*B^T ", bf16 ? "bfloat16 " : "float32 ", x2.size(0), "x",
                                     out, "x", in,
                                     relu             ? " +relu"
                                     : bias.defined() ? " +bias"
                                                      : "",
                                     p > 0 ? " +dropout" : "",
                                     residual.defined() ? " +residual" : "", bf16 ? " ->bf16" : "");
      },
      2.0 * static_cast<double>(x2.size(0)) * out * in);
  std::vector<Tensor> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  if (residual.defined()) inputs.push_back(residual);
  // Under bf16 the node keeps the float32 master weight and rounds it again
  // for gx (Note [16-bit linear]: no bfloat16 copy per micro-batch).
  record_split(
      bf16 ? "linear_16bit" : "linear", inputs, y,
      [xd = x2.detach(), wd = bf16 ? weight.detach() : wd.detach(),
       ys = relu ? y.detach() : Tensor(), act, bf16, p, key,
       xs = std::vector<int64_t>(x.shape().begin(), x.shape().end()), has_bias = bias.defined(),
       has_residual = residual.defined(), need_x = x.requires_grad(),
       need_w = weight.requires_grad(), need_b = bias.defined() && bias.requires_grad(),
       need_r = residual.defined() && residual.requires_grad()](const std::vector<Tensor>& g,
                                                                const std::vector<bool>& wanted) {
        NoGradGuard no_grad;
        // Through the dropout first (its backward: the same mask on g). Under
        // ReLU the mask of y > 0 then differs from the activation's only
        // where the dropout already zeroed the gradient.
        Tensor gy = detail::dense(g[0]);
        if (p > 0) {
          Tensor gd = Tensor::empty(gy.shape(), gy.dtype(), gy.device());
          dropout_apply(gy.device(), gy, p, key, gd);
          gy = gd;
        }
        const bool want_x = need_x && wanted[0], want_w = need_w && wanted[1];
        const bool want_b = need_b && wanted[2];
        const size_t r_at = has_bias ? 3 : 2;
        const bool want_r = need_r && wanted[r_at];
        // gz = gy act'(y): its own tensor under ReLU, gy itself without an activation.
        const bool own_gz = act == FusedActivation::kRelu && (want_x || want_w);
        Tensor gz = own_gz ? Tensor::empty(gy.shape(), gy.dtype(), gy.device()) : Tensor();
        Tensor gb = want_b ? Tensor::empty(Shape{gy.size(-1)}, bf16 ? DType::kFloat32 : gy.dtype(),
                                           gy.device())
                           : Tensor();
        if (gz.defined() || gb.defined())
          bias_act_backward(gy.device(), act, Tensor(), Tensor(), ys, gy, gz, gb);
        const Tensor& dz = own_gz ? gz : gy;
        std::vector<Tensor> out(r_at + (has_residual ? 1 : 0));
        if (has_bias) out[2] = gb;
        if (want_r) out[r_at] = g[0];  // the add's gradient: the upstream one
        if (!bf16) {
          if (want_x) out[0] = matmul(dz, wd, false, false);
          if (want_w) out[1] = matmul(reshape(dz, {-1, dz.size(-1)}), xd, true, false);
          return out;
        }
        // The 16-bit linear's backward (linear_16bit) on the bfloat16-rounded gz.
        const Tensor gh = rounded(reshape(dz, {-1, dz.size(-1)}), true);
        if (want_x) {
          const Tensor w16 = weight_operand(wd, true);
          Tensor gx = product_bf16_out(gh, w16, false);
          if (!gx.defined()) gx = cast(matmul(gh, w16, false, false), DType::kBFloat16);
          out[0] = reshape(gx, xs);
        }
        if (want_w) out[1] = matmul(gh, xd, true, false);
        return out;
      });
  return y;
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, FusedActivation act,
              const Tensor& residual, const FusedDropout& dropout) {
  detail::check_rank("linear", weight, 2, "weight [out, in]");
  GPIPE_CHECK(x.rank() >= 1 && x.size(-1) == weight.size(1), "linear: input ", x.shape(),
              " does not match weight ", weight.shape(), " (expected last axis ", weight.size(1),
              ")");
  if (bias.defined())
    GPIPE_CHECK(bias.rank() == 1 && bias.size(0) == weight.size(0), "linear: bias ", bias.shape(),
                " does not match weight ", weight.shape(), " (expected [", weight.size(0), "])");
  if (residual.defined()) {
    std::vector<int64_t> dims(x.shape().begin(), x.shape().end() - 1);
    dims.push_back(weight.size(0));
    GPIPE_CHECK(residual.shape() == Shape(dims), "linear: residual ", residual.shape(),
                " does not match the output ", Shape(dims));
  }
  GPIPE_CHECK(dropout.p >= 0.0 && dropout.p < 1.0, "linear: dropout p must be in [0, 1), got ",
              dropout.p);
  // The fused backward reads ReLU's mask off its output, which a residual would change.
  if (residual.defined() && act != FusedActivation::kNone)
    return add(residual, linear(x, weight, bias, act, Tensor(), dropout));
  if (const FusedLinear kind = fused_linear_kind(x, weight, bias, act, residual, dropout.p);
      kind != FusedLinear::kNone)
    return fused_linear(x, weight, bias, act, kind == FusedLinear::kBFloat16, residual, dropout);
  const Precision p = current_precision();
  const bool half = p != Precision::kFloat32 &&
                    (x.dtype() == DType::kFloat32 || is_half(x.dtype())) &&
                    weight.dtype() == DType::kFloat32;
  // A 16-bit input gives a 16-bit output (Note [16-bit activations] in
  // layers/layer.cc): the float32 product is rounded before the bias and
  // activation, which then keep a 16-bit tensor for backward.
  const DType out = is_half(x.dtype()) ? x.dtype() : DType::kFloat32;
  auto product = [&](const Tensor& rows) {
    return half ? linear_16bit(rows, weight, p == Precision::kBFloat16, out)
                : matmul(rows, weight, false, true);
  };
  Tensor y = x.rank() == 1 ? reshape(product(reshape(x, {1, -1})), {weight.size(0)}) : product(x);
  if (is_half(out) && y.dtype() != out) y = cast(y, out);
  // The bias and activation as one fused epilogue pass.
  if (bias.defined() || act != FusedActivation::kNone) y = bias_activation(y, bias, act);
  if (dropout.p > 0) y = ops::dropout(y, dropout.p, true, dropout.salt);
  return residual.defined() ? add(residual, y) : y;
}

}  // namespace gpipe::ops
