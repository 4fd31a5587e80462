// The 16-bit roundings of float32 master weights, made once per step.
//
// Note [Weight casts]. Under bf16 / fp16 precision a linear layer
// multiplies the 16-bit rounding of its float32 weight (Note [16-bit
// linear] in ops/linalg.cc), in every micro-batch's forward, recompute and
// backward. Within one pipeline step the weights do not change (the one
// synchronous update comes after it), so while a WeightCastScope is open on
// the calling thread the rounding of a weight is made once, on its first
// use, and shared by every later use until the scope closes: one cast per
// weight and step instead of about 3 M. StageExecutor::run opens a scope for
// each program it runs (a training step, an evaluation). Without a scope
// (single-device code, tests) every use rounds anew, as before. Entries are
// keyed by the bytes a weight views (storage, offset, size, dtype), so the
// parameter and the detached copy its backward holds share one; only
// contiguous tensors without autograd history (parameters) are cached, each
// entry holding its source so no storage is reused while the scope lives; the cached
// copies are freed when the scope closes, so nothing stays live between
// steps. A weight changed in place inside a scope would be read stale: the
// pipeline never does that (the optimizer runs between steps).
#pragma once

#include <cstdint>
#include <functional>

#include "core/tensor.h"

namespace gpipe::ops {

class WeightCastScope {
 public:
  WeightCastScope();
  ~WeightCastScope();
  WeightCastScope(const WeightCastScope&) = delete;
  WeightCastScope& operator=(const WeightCastScope&) = delete;

 private:
  bool owner_;  // the outermost scope of this thread: it holds and frees the cache
};

// `make()` (the rounding of `weight` of kind `variant`, e.g. 0 bf16, 1 fp16),
// made once per open scope for a leaf `weight`, else every call.
Tensor cached_weight_cast(const Tensor& weight, int variant, const std::function<Tensor()>& make);

// The 16-bit operand of a float32 weight `w` under bf16 (bf16: its bfloat16
// rounding) or fp16 (its float16 rounding widened back to float32: the
// float32 products need float32 operands, while the cache keeps the half-size
// float16 form), through cached_weight_cast; no autograd history.
Tensor weight_operand(const Tensor& w, bool bf16);

// Roundings made by cached_weight_cast since the process started (every
// thread): what the structural test counts per step.
int64_t weight_casts_made();

}  // namespace gpipe::ops
