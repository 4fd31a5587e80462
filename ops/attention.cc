// Attention fronts: argument checks, then the fused kernels where the device
// has them (saving q, k, v and the probabilities for backward), else the
// composed form.
#include "ops/attention.h"

#include <algorithm>
#include <cmath>

#include "core/autograd.h"
#include "core/rng.h"
#include "ops/attention_kernels.h"
#include "ops/common.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/linalg.h"
#include "ops/mask.h"
#include "ops/shape.h"
#include "ops/softmax.h"

namespace gpipe::ops {
namespace {

// Note [Masked scores]: a masked score is -1e9, or float16's lowest finite
// value (-65504) where -1e9 does not exist (it would round to -inf, and a
// fully masked row would be -inf - -inf = NaN). Either is far enough below
// any real score that exp() gives exactly 0 once one key is unmasked, and a
// fully masked row gets uniform weights in every dtype.
double masked_score(DType t) { return t == DType::kFloat16 ? -65504.0 : -1e9; }

void check_args(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads,
                const Tensor& pad) {
  detail::check_rank("attention", q, 3, "the queries");
  detail::check_rank("attention", k, 3, "the keys");
  detail::check_rank("attention", v, 3, "the values");
  detail::check_floating("attention", q, "the queries");
  detail::check_same_dtype_device("attention", {q, k, v});
  const int64_t b = q.size(0), d = q.size(2);
  GPIPE_CHECK(heads >= 1 && d % heads == 0, "attention: the width D = ", d,
              " of the queries is not divisible by ", heads, " heads");
  GPIPE_CHECK(d > 0 && k.size(1) > 0,
              "attention: expected a positive width and at least one key, got queries ", q.shape(),
              " and keys ", k.shape());
  GPIPE_CHECK(k.size(0) == b && k.size(2) == d, "attention: expected keys [", b, ", Tk, ", d,
              "], got ", k.shape());
  GPIPE_CHECK(v.shape() == k.shape(), "attention: expected values of the keys' shape ", k.shape(),
              ", got ", v.shape());
  if (pad.defined()) {
    GPIPE_CHECK(pad.rank() == 2 && pad.size(0) == b && pad.size(1) == k.size(1),
                "attention: expected key padding [", b, ", ", k.size(1), "], got ", pad.shape());
    GPIPE_CHECK(pad.device() == q.device(), "attention: key padding is on ", pad.device(),
                " but the queries on ", q.device());
  }
}

}  // namespace

namespace {

// attention_composed with one more mask: `extra` broadcasts to the scores
// [B, heads, Tq, Tk] (nonzero = masked), or is undefined.
Tensor composed_masked(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads,
                       bool causal, const Tensor& key_padding, const Tensor& extra,
                       const std::function<Tensor(const Tensor&)>& on_probs) {
  const int64_t b = q.size(0), tq = q.size(1), tk = k.size(1), d = q.size(2), dh = d / heads;
  auto split = [&](const Tensor& x, int64_t t) {
    return permute(reshape(x, {b, t, heads, dh}), {0, 2, 1, 3});
  };
  // 16-bit q, k, v (Note [16-bit activations]): the products come back
  // float32 and are rounded once to q's dtype, so the scores and the
  // probabilities kept for backward are 16-bit and so is the result, as
  // with the fused kernel.
  auto like_q = [&](const Tensor& t) {
    return is_half(q.dtype()) && t.dtype() != q.dtype() ? cast(t, q.dtype()) : t;
  };
  Tensor scores = like_q(mul_scalar(matmul(split(q, tq), split(k, tk), false, true),
                                    1.0 / std::sqrt(static_cast<double>(dh))));
  if (causal)
    scores = masked_fill(scores, causal_mask(tq, tk, scores.dtype()).to(scores.device()),
                         masked_score(scores.dtype()));
  if (key_padding.defined())
    scores = masked_fill(scores, reshape(key_padding, {b, 1, 1, tk}), masked_score(scores.dtype()));
  if (extra.defined()) scores = masked_fill(scores, extra, masked_score(scores.dtype()));
  Tensor p = softmax(scores, -1);
  if (on_probs) p = on_probs(p);
  return like_q(reshape(permute(matmul(p, split(v, tk)), {0, 2, 1, 3}), {b, tq, d}));
}

}  // namespace

Tensor attention_composed(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads,
                          bool causal, const Tensor& key_padding,
                          const std::function<Tensor(const Tensor&)>& on_probs) {
  check_args(q, k, v, heads, key_padding);
  return composed_masked(q, k, v, heads, causal, key_padding, Tensor(), on_probs);
}

Tensor document_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads,
                          const Tensor& segments, const FusedDropout& dropout) {
  check_args(q, k, v, heads, Tensor());
  const int64_t b = q.size(0), t = q.size(1);
  GPIPE_CHECK(k.size(1) == t, "document attention: self-attention, expected keys of the ", t,
              " query positions, got ", k.shape());
  GPIPE_CHECK(segments.defined() && segments.rank() == 2 && segments.size(0) == b &&
                  segments.size(1) == t && is_integral(segments.dtype()),
              "document attention: expected int segment ids [", b, ", ", t, "], got ",
              segments.defined() ? gpipe::detail::concat(segments.dtype(), segments.shape())
                                 : std::string("none"));
  GPIPE_CHECK(dropout.p >= 0 && dropout.p < 1, "attention: dropout probability ", dropout.p,
              " is outside [0, 1)");
  const std::vector<int64_t> seg =
      (segments.device().is_cpu() ? segments : segments.to(kCpu)).to_vector<int64_t>();
  // Rows of one document each: plain causal attention, the fused kernels.
  if (std::all_of(seg.begin(), seg.end(), [&](int64_t s) { return s == seg.front(); }))
    return attention(q, k, v, heads, true, Tensor(), dropout);
  // 1 where key j lies in another document than query i ([B, 1, T, T]).
  std::vector<float> other(static_cast<size_t>(b * t * t));
  for (int64_t r = 0; r < b; ++r)
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = 0; j < t; ++j)
        other[static_cast<size_t>((r * t + i) * t + j)] =
            seg[static_cast<size_t>(r * t + i)] != seg[static_cast<size_t>(r * t + j)] ? 1.f : 0.f;
  const Tensor mask = Tensor::from_vector(other, Shape{b, 1, t, t}).to(q.device());
  if (dropout.p == 0) return composed_masked(q, k, v, heads, true, Tensor(), mask, {});
  return composed_masked(q, k, v, heads, true, Tensor(), mask, [&](const Tensor& p) {
    return ops::dropout(p, dropout.p, true, dropout.salt);
  });
}

namespace {

// Note [Attention dropout]. Dropout on the attention probabilities P [B,
// heads, Tq, Tk] is ops::dropout on them: probability (b, h, i, j) is kept
// where element ((b heads + h) Tq + i) Tk + j of the float32 Philox stream
// current_rng_context().key(salt) is >= dropout_keep_threshold(p) (p
// rounded up to a float, as ops::dropout compares), and scaled by 1 / (1 - p). The
// fused kernels draw that mask where they make P, so the composed form with
// on_probs = ops::dropout and the fused op agree (mask for mask; values to
// round-off), and neither materialises a second score-sized tensor. With
// the dropped P' = P * mask / (1 - p), out = P' v, and backward needs
// dv = P'^T dout, dP = mask / (1 - p) * (dout v^T), dS = P (dP - D) with
// D_i = sum_j P_ij dP_ij = dout_i . out_i, as without dropout: the CPU
// kernels read the mask from the saved probabilities' sign bits, the CUDA
// flash kernels draw it again.
Tensor composed_with(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads, bool causal,
                     const Tensor& pad, const FusedDropout& dropout) {
  if (dropout.p == 0) return attention_composed(q, k, v, heads, causal, pad);
  return attention_composed(q, k, v, heads, causal, pad, [&](const Tensor& p) {
    return ops::dropout(p, dropout.p, true, dropout.salt);
  });
}

// Flash kernels (CUDA): only the row log-sum-exps are kept for backward, with
// q, k, v and the output (Note [Flash attention on CUDA] in
// ops/cuda/attention.cu).
Tensor flash_attention(const Tensor& qd, const Tensor& kd, const Tensor& vd, const Tensor& pad,
                       const std::vector<Tensor>& inputs, int64_t heads, bool causal, double p,
                       uint64_t key) {
  const Device dev = qd.device();
  const int64_t b = qd.size(0), tq = qd.size(1);
  Tensor out = Tensor::empty(qd.shape(), qd.dtype(), dev);
  Tensor lse = Tensor::empty(
      Shape{b * heads, tq}, qd.dtype() == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32, dev);
  flash_attention_forward(dev, qd, kd, vd, pad, heads, causal, p, key, out, lse);
  const Tensor saved_out = out.detach();
  record("attention", inputs, out,
         [qd, kd, vd, pad, saved_out, lse, heads, causal, p, key](const std::vector<Tensor>& g) {
           const Tensor gout = detail::dense(g[0]);
           Tensor gq = Tensor::empty(qd.shape(), qd.dtype(), qd.device());
           Tensor gk = Tensor::empty(kd.shape(), kd.dtype(), kd.device());
           Tensor gv = Tensor::empty(vd.shape(), vd.dtype(), vd.device());
           flash_attention_backward(qd.device(), qd, kd, vd, pad, saved_out, lse, gout, heads,
                                    causal, p, key, gq, gk, gv);
           return std::vector<Tensor>{gq, gk, gv};
         });
  return out;
}

}  // namespace

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads, bool causal,
                 const Tensor& key_padding, const FusedDropout& dropout) {
  check_args(q, k, v, heads, key_padding);
  GPIPE_CHECK(dropout.p >= 0 && dropout.p < 1, "attention: dropout probability ", dropout.p,
              " is outside [0, 1)");
  const Device dev = q.device();
  const double p = dropout.p;
  const bool flash = flash_attention_forward.has(dev.type) &&
                     flash_attention_backward.has(dev.type) &&
                     flash_attention_takes(dev, q.size(2) / heads, p > 0);
  if (!flash && (!attention_forward.has(dev.type) || !attention_backward.has(dev.type)))
    return composed_with(q, k, v, heads, causal, key_padding, dropout);
  const uint64_t key = p > 0 ? current_rng_context().key(dropout.salt) : 0;
  const Tensor qd = detail::dense(q).detach(), kd = detail::dense(k).detach(),
               vd = detail::dense(v).detach();
  Tensor pad;
  if (key_padding.defined()) pad = detail::dense(key_padding.detach().to(q.dtype()));
  if (flash) return flash_attention(qd, kd, vd, pad, {q, k, v}, heads, causal, p, key);
  const int64_t b = q.size(0), tq = q.size(1), tk = k.size(1);
  Tensor out = Tensor::empty(q.shape(), q.dtype(), dev);
  Tensor probs = Tensor::empty(Shape{b * heads, tq, tk}, q.dtype(), dev);
  attention_forward(dev, qd, kd, vd, pad, heads, causal, p, key, out, probs);
  record("attention", {q, k, v}, out,
         [qd, kd, vd, pad, probs, heads, causal, p](const std::vector<Tensor>& g) {
           const Tensor gout = detail::dense(g[0]);
           Tensor gq = Tensor::empty(qd.shape(), qd.dtype(), qd.device());
           Tensor gk = Tensor::empty(kd.shape(), kd.dtype(), kd.device());
           Tensor gv = Tensor::empty(vd.shape(), vd.dtype(), vd.device());
           attention_backward(qd.device(), qd, kd, vd, pad, probs, gout, heads, causal, p, gq, gk,
                              gv);
           return std::vector<Tensor>{gq, gk, gv};
         });
  return out;
}

}  // namespace gpipe::ops
