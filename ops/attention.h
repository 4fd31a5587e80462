// Multi-head scaled dot-product attention as one op.
//
//   out[b, i, h*dh : (h+1)*dh] = sum_j P[b, h, i, j] v[b, j, h*dh : (h+1)*dh]
//   P[b, h, i, :] = softmax_j(mask(q_h[b, i] . k_h[b, j] / sqrt(dh)))
//
// q [B, Tq, D], k and v [B, Tk, D], D = heads * dh, all of one floating
// dtype and device; key_padding [B, Tk] (nonzero = a padded key, ignored) or
// undefined; causal: query i sees keys j <= i. A masked score is replaced by
// -1e9 (float16: its lowest finite value, -65504; not -inf), so a fully
// masked row stays finite (uniform weights) in every dtype (Note [Masked
// scores] in ops/attention.cc).
// Heads are read and written in place in the [B, T, D] layout: no permuted
// copies. Throws gpipe::Error naming the bad shape, dtype or device.
#pragma once

#include <functional>

#include "core/tensor.h"
#include "ops/dropout.h"

namespace gpipe::ops {

// Fused: on the CPU one kernel per direction that keeps the probabilities
// (Note [Fused attention] in ops/cpu/attention.cc); on CUDA flash kernels that
// keep only each row's log-sum-exp (Note [Flash attention on CUDA] in
// ops/cuda/attention.cu; heads up to 128 wide); the composed form below
// elsewhere.
// `dropout` (training) drops probabilities inside the kernels: the mask and
// result of attention_composed with on_probs = ops::dropout(P, p, true,
// salt), whose P is [B, heads, Tq, Tk] (Note [Attention dropout] in
// ops/attention.cc).
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads, bool causal,
                 const Tensor& key_padding = Tensor(), const FusedDropout& dropout = {});

// The same from primitive ops (reshape, permute, matmul, masked_fill,
// softmax): the reference the fused op is tested against, and the form used
// where the device has no fused kernels for the case. `on_probs` acts on the
// probabilities (ops::dropout there is what `attention`'s dropout equals).
Tensor attention_composed(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads,
                          bool causal, const Tensor& key_padding = Tensor(),
                          const std::function<Tensor(const Tensor&)>& on_probs = {});

// Causal self-attention kept inside documents: query i sees key j only when
// j <= i and segments[b, i] == segments[b, j]. q, k, v [B, T, D];
// segments [B, T], int, on any device (the mask is built on the CPU). The
// composed form with that mask (no fused kernel takes segments), dropout as
// `attention`'s; a batch whose ids are all one value is `attention`, causal. Throws gpipe::Error
// for a segments shape other than [B, T] or a non-integer dtype.
Tensor document_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads,
                          const Tensor& segments, const FusedDropout& dropout = {});

}  // namespace gpipe::ops
