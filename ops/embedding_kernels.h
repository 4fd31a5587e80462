// Kernel slots of the embedding lookup (ops/embedding.h).
//
// weight [V, D] float, indices int32/int64 contiguous (any shape, read
// flat), rows of out / g are [indices.numel(), D] contiguous.
#pragma once

#include "core/tensor.h"
#include "ops/dispatch.h"

namespace gpipe::ops {

// out[k] = weight[indices[k]]. Checks every index first and throws
// gpipe::Error naming the first one outside [0, V) before writing anything.
GPIPE_DECLARE_KERNEL(embedding_forward,
                     void(const Tensor& weight, const Tensor& indices, Tensor& out));
// The scatter-add of the rows of g by index into gweight [V, D]: with
// `accumulate` added to gweight's rows, touching only the rows some index
// names; otherwise gweight is overwritten (every row). Deterministic: each
// row sums its contributions in position order.
GPIPE_DECLARE_KERNEL(embedding_backward, void(const Tensor& g, const Tensor& indices,
                                              bool accumulate, Tensor& gweight));

}  // namespace gpipe::ops
