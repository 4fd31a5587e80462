// Masking for attention: masked_fill and the two standard masks.
//
// Typical use, with scores [B, H, T_q, T_k]:
//   scores = masked_fill(scores, causal_mask(T_q, T_k), -INFINITY);
//   scores = masked_fill(scores, padding_mask(lengths, T_k), -INFINITY);
//   probs = softmax(scores);
// softmax maps -inf to probability 0 as long as every row keeps at least one
// finite score. A row with every key masked (e.g. a length-0 sequence) gives
// NaN: fully masked rows are the caller's problem (give every sequence at
// least one key, or zero those rows afterwards).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace gpipe::ops {

// out = mask != 0 ? value : x. x: float32/float64, any strides. mask: any
// float or int dtype, on x's device, broadcastable to x's shape (numpy rules;
// it may not enlarge x). Returns a new contiguous tensor of x's shape.
// Differentiable w.r.t. x: the gradient is zero where filled, g elsewhere
// (the mask gets none). Throws gpipe::Error for a non-float x, an
// unsupported mask dtype, another device or a mask that does not broadcast.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

// [t_q, t_k] CPU tensor with 1 where key j > query i (the future, to be
// filled with -inf) and 0 elsewhere. Query i and key i are aligned at the
// top-left corner. Throws for negative sizes.
Tensor causal_mask(int64_t t_q, int64_t t_k, DType dtype = DType::kFloat32);

// lengths: [B] int32/int64, each in [0, t_k]. Returns [B, 1, 1, t_k] (on
// lengths' device) with 1 at the padded key positions j >= lengths[b] and 0
// elsewhere; it broadcasts against scores [B, H, T_q, T_k]. Throws for a
// bad lengths shape/dtype or a length outside [0, t_k] (naming it).
Tensor padding_mask(const Tensor& lengths, int64_t t_k, DType dtype = DType::kFloat32);

}  // namespace gpipe::ops
