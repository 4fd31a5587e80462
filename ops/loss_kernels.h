// Kernel slots of the cross-entropy loss (ops/loss.h).
//
// logits contiguous, viewed as [N, C] (C = last axis, N = the product of
// the others); targets contiguous int32/int64 with N elements.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "ops/dispatch.h"

namespace gpipe::ops {

// loss ([] scalar) = mean over non-ignored rows of the (smoothed) negative
// log-likelihood, 0 if every row is ignored; lse ([N]) = log-sum-exp of each
// row, saved for backward. Checks every target first and throws gpipe::Error
// naming the first one outside [0, C) that is not ignore_index.
GPIPE_DECLARE_KERNEL(cross_entropy_forward,
                     void(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                          double label_smoothing, Tensor& loss, Tensor& lse));
// gx ([N, C]) = (softmax(logits) - smoothed one-hot) * g / count, zero on
// ignored rows (and everywhere when count is 0). g is the [] loss gradient.
GPIPE_DECLARE_KERNEL(cross_entropy_backward,
                     void(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                          const Tensor& g, int64_t ignore_index, double label_smoothing,
                          Tensor& gx));

// The output projection and the loss in one (Note [Fused output loss] in
// ops/loss.cc): loss ([] float32) = cross_entropy(x w^T, targets) for x
// [N, d] and w [C, d], both float32 or both bfloat16, computing z.size(0)
// rows of logits at a time into the scratch z (float32 [rows, C] with a
// gradient, [rows, 0] without; laid out as the kernel likes: the CPU's holds
// them block by block, Note [Vocabulary blocks] in ops/cpu/loss.cc), never
// all N. With gx defined (x's dtype, [N, d]) and gw
// (float32 [C, d]), also the gradients of that loss (upstream gradient 1). Optional:
// ops::linear_cross_entropy runs linear then cross_entropy on a device
// without it (CUDA today).
GPIPE_DECLARE_KERNEL(linear_cross_entropy_fused,
                     void(const Tensor& x, const Tensor& w, const Tensor& targets,
                          int64_t ignore_index, double label_smoothing, Tensor& z, Tensor& loss,
                          Tensor& gx, Tensor& gw));

}  // namespace gpipe::ops
