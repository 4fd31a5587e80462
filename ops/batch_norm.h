// Batch normalisation with per-channel statistics (channel axis 1).
//
//   x     [N, C] or [N, C, H, W] (any [N, C, *]), float32 or float64
//   gamma, beta [C] or undefined (scale 1, shift 0)
//   running_mean, running_var [C]
//
// Training: normalises with the batch mean and biased variance over N and
// the trailing axes, and returns them (as new tensors without autograd
// history) so the caller — a layer, or the pipeline combining micro-batches —
// updates the running statistics itself with update_running_stats.
// batch_norm never modifies running_mean / running_var; they may be
// undefined in training. Eval: normalises with running_mean / running_var.
// y is differentiable in x, gamma and beta (in training through the batch
// statistics); running statistics get no gradient.
//
// Throws gpipe::Error, naming batch_norm and the offending values, for a rank
// below 2, a non-float x, gamma / beta / running statistics that are not [C]
// or differ in dtype or device, undefined running statistics in eval, a
// negative eps, or a single value per channel in training.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace gpipe::ops {

struct BatchNormResult {
  Tensor y;     // x's shape
  Tensor mean;  // [C] batch mean in training; undefined in eval
  Tensor var;   // [C] biased batch variance in training; undefined in eval
};

BatchNormResult batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                           const Tensor& running_mean, const Tensor& running_var, bool training,
                           double eps = 1e-5);

// In place and without autograd:
//   running_mean = (1 - momentum) * running_mean + momentum * batch_mean
//   running_var  = (1 - momentum) * running_var + momentum * batch_var * count / (count - 1)
// `count` is the number of values per channel the batch statistics came from
// (N * H * W). Throws gpipe::Error for count < 2, momentum outside [0, 1], or
// tensors that are not all [C] of one dtype and device.
void update_running_stats(Tensor& running_mean, Tensor& running_var, const Tensor& batch_mean,
                          const Tensor& batch_var, int64_t count, double momentum);

}  // namespace gpipe::ops
