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

}  // namespace gpipe::ops
