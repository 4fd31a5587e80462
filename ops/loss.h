// Losses.
//
// cross_entropy: softmax cross-entropy with PyTorch's semantics for
// reduction = "mean". For row i with target t_i and smoothing eps,
//   loss_i = (1 - eps) * (-log p_i[t_i]) + eps * mean_c(-log p_i[c]),
//   p_i = softmax(logits_i),
// and the result is the mean of loss_i over the rows whose target is not
// ignore_index (0, with zero gradients, if every row is ignored).
//   logits:  [N, C] float32/float64, or [..., C] with targets [...] (leading
//            axes are flattened);
//   targets: int32/int64 of logits' shape without the last axis, on logits'
//            device; values in [0, C) or equal to ignore_index.
// Returns a [] scalar of logits' dtype; differentiable w.r.t. logits (fused
// log-softmax forward, hand-written backward).
// Throws gpipe::Error for mismatched shapes/dtypes/devices, label_smoothing
// outside [0, 1], or a target out of range (naming the target, its position
// and C).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace gpipe::ops {

struct CrossEntropyOptions {
  int64_t ignore_index = -100;   // rows with this target contribute nothing
  double label_smoothing = 0.0;  // eps in [0, 1]
};

Tensor cross_entropy(const Tensor& logits, const Tensor& targets,
                     const CrossEntropyOptions& opt = {});

}  // namespace gpipe::ops
