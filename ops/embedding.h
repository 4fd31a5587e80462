// Embedding lookup: rows of a [V, D] table gathered by integer indices.
//
//   embedding(weight, indices)[i..., :] = weight[indices[i...], :]
//
// weight: [V, D] float32/float64. indices: int32 or int64, any shape (rank 0
// included), any device-matching strides. Returns indices.shape + [D] in
// weight's dtype. Differentiable w.r.t. weight only: the gradient is a dense
// [V, D] scatter-add of the output gradient (repeated indices add up),
// computed deterministically.
// Throws gpipe::Error if weight is not a 2-D float tensor, indices are not
// integers, the two are on different devices, or an index lies outside
// [0, V) (the message names the index, its flat position and V).
#pragma once

#include "core/tensor.h"

namespace gpipe::ops {

Tensor embedding(const Tensor& weight, const Tensor& indices);

}  // namespace gpipe::ops
