// Kernel slots of the fused attention op (ops/attention.h).
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "ops/dispatch.h"

namespace gpipe::ops {

// q [B, Tq, D], k and v [B, Tk, D] contiguous (D = heads * dh), key_padding
// [B, Tk] contiguous of q's dtype (nonzero = masked key) or undefined.
// Writes out [B, Tq, D] and probs [B * heads, Tq, Tk] (the softmax, saved
// for backward).
// Dropout (p > 0; Note [Attention dropout] in ops/attention.cc): probability
// (bh, i, j) is kept where element (bh * Tq + i) * Tk + j of the float32
// Philox stream `key` is >= dropout_keep_threshold(p) (core/rng.h: p
// rounded up to a float), and scaled by 1 / (1 - p); out = P' v with the
// dropped P'. probs then holds -P where a nonzero P is dropped, so backward
// reads the mask instead of drawing it again (a zero needs no mask).
GPIPE_DECLARE_KERNEL(attention_forward, void(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const Tensor& key_padding, int64_t heads, bool causal,
                                             double p, uint64_t key, Tensor& out, Tensor& probs));
// Gradients of out with respect to q, k and v, given gout [B, Tq, D]
// contiguous and the forward's probs (and its dropout p).
GPIPE_DECLARE_KERNEL(attention_backward, void(const Tensor& q, const Tensor& k, const Tensor& v,
                                              const Tensor& key_padding, const Tensor& probs,
                                              const Tensor& gout, int64_t heads, bool causal,
                                              double p, Tensor& gq, Tensor& gk, Tensor& gv));

// Flash-style kernels (CUDA only; Note [Flash attention on CUDA] in
// ops/cuda/attention.cu): the forward saves, instead of the probabilities,
// lse [B * heads, Tq] (float32, float64 for float64 q), each row's
// log-sum-exp of its scaled visible scores, or -inf for a row that sees no
// key (uniform weights). Backward also reads the forward's out, and draws
// the dropout mask (the forward's, as above) again.
// flash_attention_takes(dh, dropout): whether the flash kernels take heads
// dh wide (up to kFlashAttentionMaxHeadDim) with or without dropout;
// ops::attention uses the composed form where they do not.
inline constexpr int64_t kFlashAttentionMaxHeadDim = 128;
GPIPE_DECLARE_KERNEL(flash_attention_takes, bool(int64_t head_dim, bool dropout));
GPIPE_DECLARE_KERNEL(flash_attention_forward,
                     void(const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& key_padding, int64_t heads, bool causal, double p,
                          uint64_t key, Tensor& out, Tensor& lse));
GPIPE_DECLARE_KERNEL(flash_attention_backward,
                     void(const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& key_padding, const Tensor& out, const Tensor& lse,
                          const Tensor& gout, int64_t heads, bool causal, double p, uint64_t key,
                          Tensor& gq, Tensor& gk, Tensor& gv));

}  // namespace gpipe::ops
