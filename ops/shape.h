// Shape and layout ops. reshape/permute/transpose/slice/narrow/split/expand
// return views that share storage when the layout allows (reshape copies a
// non-contiguous input); concat copies. All are differentiable. Axes may be
// negative. split and concat along axis 0 are how micro-batches are made.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace gpipe::ops {

// One size may be -1 (inferred). Throws if numel differs.
Tensor reshape(const Tensor& x, std::vector<int64_t> shape);
Tensor flatten(const Tensor& x, int64_t start_axis = 0, int64_t end_axis = -1);
Tensor unsqueeze(const Tensor& x, int64_t axis);
Tensor squeeze(const Tensor& x, int64_t axis);  // axis must have size 1
// out.shape[i] = x.shape[perm[i]]
Tensor permute(const Tensor& x, std::vector<int64_t> perm);
Tensor transpose(const Tensor& x, int64_t a, int64_t b);
// Elements [start, end) of `axis` with step `step` (>0); start/end clamp like Python slices.
Tensor slice(const Tensor& x, int64_t axis, int64_t start, int64_t end, int64_t step = 1);
// `length` elements of `axis` from `start`; throws if out of range.
Tensor narrow(const Tensor& x, int64_t axis, int64_t start, int64_t length);
// Broadcast view to `shape` (numpy rules); gradient sums over broadcast axes.
Tensor expand(const Tensor& x, const Shape& shape);
// Sums x over broadcast axes so it has `shape` (inverse of expand).
Tensor sum_to(const Tensor& x, const Shape& shape);
Tensor concat(const std::vector<Tensor>& xs, int64_t axis);
// Pieces of the given sizes (must sum to x.size(axis)); one autograd node for all.
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t axis);
// `chunks` nearly equal pieces (the first ones one larger when not divisible).
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t axis);

}  // namespace gpipe::ops
