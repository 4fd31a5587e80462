// Kernel slots for batch normalisation. See ops/batch_norm.h.
//
// x / y / grad_y / grad_x are contiguous [N, C, *] (per-channel statistics
// over N and the trailing axes); mean, var, gamma, beta and the gradients of
// gamma and beta are contiguous [C] of x's dtype. Outputs are preallocated and
// fully overwritten; an undefined gamma / beta means 1 / 0, and an undefined
// gradient output is not computed.
#pragma once

#include "core/tensor.h"
#include "ops/dispatch.h"

namespace gpipe::ops {

// Per-channel mean and biased variance of x.
GPIPE_DECLARE_KERNEL(batch_norm_stats, void(const Tensor& x, Tensor& mean, Tensor& var));
// y = (x - mean) / sqrt(var + eps) * gamma + beta.
GPIPE_DECLARE_KERNEL(batch_norm_forward,
                     void(const Tensor& x, const Tensor& mean, const Tensor& var,
                          const Tensor& gamma, const Tensor& beta, double eps, Tensor& y));
// Gradients of batch_norm_forward. training: mean/var are x's own batch
// statistics and the gradient flows through them; otherwise they are constants.
GPIPE_DECLARE_KERNEL(batch_norm_backward,
                     void(const Tensor& grad_y, const Tensor& x, const Tensor& mean,
                          const Tensor& var, const Tensor& gamma, double eps, bool training,
                          Tensor& grad_x, Tensor& grad_gamma, Tensor& grad_beta));
// In place: running = (1 - momentum) * running + momentum * stat, with the
// batch variance multiplied by `unbias` (count / (count - 1)) first.
GPIPE_DECLARE_KERNEL(batch_norm_update_running_stats,
                     void(const Tensor& batch_mean, const Tensor& batch_var, double momentum,
                          double unbias, Tensor& running_mean, Tensor& running_var));

}  // namespace gpipe::ops
