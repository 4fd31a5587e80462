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

// linear_cross_entropy: cross_entropy(linear(x, w), targets, opt), the
// output projection and its loss in one, without the [N, C] logits in
// memory where the device has the fused kernel (Note [Fused output loss] in
// ops/loss.cc; elsewhere it runs those two ops).
//   x:       [..., d] float32, or bfloat16 under bf16 precision;
//   w:       [C, d] float32 (under bf16 precision multiplied as its bfloat16
//            rounding, as ops::linear multiplies it);
//   targets: int32/int64 of x's shape without the last axis.
// Returns the [] float32 mean loss, differentiable w.r.t. x and w.
// chunk_rows: logits rows computed at a time (0: chosen from C).
// Throws gpipe::Error as linear and cross_entropy do, naming the tensor.
Tensor linear_cross_entropy(const Tensor& x, const Tensor& w, const Tensor& targets,
                            const CrossEntropyOptions& opt = {}, int64_t chunk_rows = 0);

}  // namespace gpipe::ops
