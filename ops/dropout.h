// Inverted dropout (Srivastava et al., 2014) with a remat-safe mask.
//
//   training: y = x * keep / (1 - p),  keep_i = [u_i >= p]
//
// u_i is element i (flat row-major index of x) of the counter-based Philox
// stream current_rng_context().key(salt) (core/rng.h). The mask is thus a
// pure function of (RngContext, salt, shape): a recomputation under the same
// RngContext (gpipe::rematerialise, pipeline remat; Note [Remat RNG] in
// docs/ARCHITECTURE.md) draws the same mask, whatever the thread count or
// dtype. Use distinct salts for distinct dropouts within one layer.
// x: float32/float64, any shape and strides. p in [0, 1). With p == 0 or
// training == false, returns x itself (no copy, no graph node). Otherwise
// returns a new contiguous tensor; its gradient multiplies by the same mask
// (regenerated in backward from the saved stream key, so no mask is stored).
// Throws gpipe::Error for p outside [0, 1) or a non-float x.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace gpipe::ops {

Tensor dropout(const Tensor& x, double p, bool training, uint64_t salt = 0);

// A training dropout that an op does inside its own kernels, on one of its
// intermediate or final results (ops::linear on its output, ops::attention
// on the probabilities): ops::dropout(r, p, true, salt) on that result r,
// the same mask, drawn where r is made. p 0: none.
struct FusedDropout {
  double p = 0.0;
  uint64_t salt = 0;
};

}  // namespace gpipe::ops
