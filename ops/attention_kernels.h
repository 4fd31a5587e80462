// Kernel slots of the fused attention op (ops/attention.h).
#pragma once

#include "core/tensor.h"
#include "ops/dispatch.h"

namespace gpipe::ops {

// q [B, Tq, D], k and v [B, Tk, D] contiguous (D = heads * dh), key_padding
// [B, Tk] contiguous of q's dtype (nonzero = masked key) or undefined.
// Writes out [B, Tq, D] and probs [B * heads, Tq, Tk] (the softmax, saved
// for backward).
GPIPE_DECLARE_KERNEL(attention_forward, void(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const Tensor& key_padding, int64_t heads, bool causal,
                                             Tensor& out, Tensor& probs));
// Gradients of out with respect to q, k and v, given gout [B, Tq, D]
// contiguous and the forward's probs.
GPIPE_DECLARE_KERNEL(attention_backward,
                     void(const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& key_padding, const Tensor& probs, const Tensor& gout,
                          int64_t heads, bool causal, Tensor& gq, Tensor& gk, Tensor& gv));

// Flash-style kernels (CUDA only; Note [Flash attention on CUDA] in
// ops/cuda/attention.cu): the forward saves, instead of the probabilities,
// lse [B * heads, Tq] (float32, float64 for float64 q), each row's
// log-sum-exp of its scaled visible scores, or -inf for a row that sees no
// key (uniform weights). Backward also reads the forward's out. Heads up to
// kFlashAttentionMaxHeadDim wide; ops::attention uses the composed form for
// wider ones on such devices.
inline constexpr int64_t kFlashAttentionMaxHeadDim = 128;
GPIPE_DECLARE_KERNEL(flash_attention_forward,
                     void(const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& key_padding, int64_t heads, bool causal, Tensor& out,
                          Tensor& lse));
GPIPE_DECLARE_KERNEL(flash_attention_backward,
                     void(const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& key_padding, const Tensor& out, const Tensor& lse,
                          const Tensor& gout, int64_t heads, bool causal, Tensor& gq, Tensor& gk,
                          Tensor& gv));

}  // namespace gpipe::ops
