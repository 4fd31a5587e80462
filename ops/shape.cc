// Views and layout ops. Views are new TensorImpls over the same storage with
// adjusted shape/strides/offset; their backward maps the gradient back onto
// the input's geometry (inverse permutation, zero-padding for slices, sums
// for broadcasts).
#include "ops/shape.h"

#include <algorithm>
#include <numeric>

#include "ops/common.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"

namespace gpipe::ops {
namespace {

Tensor view_of(const Tensor& x, const Shape& shape, std::vector<int64_t> strides, int64_t offset) {
  return Tensor::make_view(x, shape, std::move(strides), offset);
}

}  // namespace

Tensor reshape(const Tensor& x, std::vector<int64_t> dims) {
  int64_t infer = -1, known = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == -1) {
      GPIPE_CHECK(infer < 0, "reshape: only one size may be -1, got ", Shape(dims));
      infer = static_cast<int64_t>(i);
    } else {
      GPIPE_CHECK(dims[i] >= 0, "reshape: invalid size ", dims[i], " in ", Shape(dims));
      known *= dims[i];
    }
  }
  if (infer >= 0) {
    GPIPE_CHECK(known > 0 && x.numel() % known == 0, "reshape: cannot reshape ", x.shape(), " (",
                x.numel(), " elements) into ", Shape(dims));
    dims[infer] = x.numel() / known;
  }
  const Shape shape(dims);
  GPIPE_CHECK(shape.numel() == x.numel(), "reshape: cannot reshape ", x.shape(), " (", x.numel(),
              " elements) into ", shape, " (", shape.numel(), " elements)");
  if (shape == x.shape()) return x;
  Tensor xd = detail::dense(x);
  Tensor out = view_of(xd, shape, shape.contiguous_strides(), xd.offset());
  const Shape in_shape = x.shape();
  record("reshape", {x}, out, [in_shape](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{reshape(g[0], in_shape.dims())};
  });
  return out;
}

Tensor flatten(const Tensor& x, int64_t start_axis, int64_t end_axis) {
  if (x.rank() == 0) return reshape(x, {1});
  const int64_t s = x.shape().normalize_axis(start_axis, "flatten");
  const int64_t e = x.shape().normalize_axis(end_axis, "flatten");
  GPIPE_CHECK(s <= e, "flatten: start axis ", start_axis, " is after end axis ", end_axis);
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < s; ++i) dims.push_back(x.shape()[i]);
  int64_t m = 1;
  for (int64_t i = s; i <= e; ++i) m *= x.shape()[i];
  dims.push_back(m);
  for (int64_t i = e + 1; i < x.rank(); ++i) dims.push_back(x.shape()[i]);
  return reshape(x, dims);
}

Tensor unsqueeze(const Tensor& x, int64_t axis) {
  const int64_t r = x.rank() + 1;
  GPIPE_CHECK(axis >= -r && axis < r, "unsqueeze: axis ", axis, " out of range for shape ",
              x.shape());
  if (axis < 0) axis += r;
  std::vector<int64_t> dims = x.shape().dims();
  dims.insert(dims.begin() + axis, 1);
  return reshape(x, dims);
}

Tensor squeeze(const Tensor& x, int64_t axis) {
  axis = x.shape().normalize_axis(axis, "squeeze");
  GPIPE_CHECK(x.shape()[axis] == 1, "squeeze: axis ", axis, " of shape ", x.shape(), " has size ",
              x.shape()[axis], ", expected 1");
  std::vector<int64_t> dims = x.shape().dims();
  dims.erase(dims.begin() + axis);
  return reshape(x, dims);
}

Tensor permute(const Tensor& x, std::vector<int64_t> perm) {
  GPIPE_CHECK(static_cast<int64_t>(perm.size()) == x.rank(), "permute: got ", perm.size(),
              " axes for a tensor of shape ", x.shape());
  std::vector<bool> used(perm.size(), false);
  std::vector<int64_t> dims(perm.size()), strides(perm.size()), inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    const int64_t p = x.shape().normalize_axis(perm[i], "permute");
    GPIPE_CHECK(!used[p], "permute: axis ", p, " appears twice in the permutation");
    used[p] = true;
    perm[i] = p;
    dims[i] = x.shape()[p];
    strides[i] = x.strides()[p];
    inverse[p] = static_cast<int64_t>(i);
  }
  Tensor out = view_of(x, Shape(dims), strides, x.offset());
  record("permute", {x}, out, [inverse](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{permute(g[0], inverse)};
  });
  return out;
}

Tensor transpose(const Tensor& x, int64_t a, int64_t b) {
  a = x.shape().normalize_axis(a, "transpose");
  b = x.shape().normalize_axis(b, "transpose");
  std::vector<int64_t> perm(x.rank());
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[a], perm[b]);
  return permute(x, perm);
}

Tensor slice(const Tensor& x, int64_t axis, int64_t start, int64_t end, int64_t step) {
  axis = x.shape().normalize_axis(axis, "slice");
  GPIPE_CHECK(step > 0, "slice: step must be positive, got ", step);
  const int64_t n = x.shape()[axis];
  auto clamp = [n](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + n : v, 0, n); };
  start = clamp(start);
  end = std::max(clamp(end), start);
  std::vector<int64_t> dims = x.shape().dims(), strides = x.strides();
  dims[axis] = (end - start + step - 1) / step;
  strides[axis] *= step;
  Tensor out = view_of(x, Shape(dims), strides, x.offset() + start * x.strides()[axis]);
  const Shape in_shape = x.shape();
  record("slice", {x}, out, [=](const std::vector<Tensor>& g) {
    Tensor gx = Tensor::zeros(in_shape, g[0].dtype(), g[0].device());
    std::vector<int64_t> s = gx.strides();
    s[axis] *= step;
    Tensor window = view_of(gx, g[0].shape(), s, start * gx.strides()[axis]);
    window.copy_from(g[0]);
    return std::vector<Tensor>{gx};
  });
  return out;
}

Tensor narrow(const Tensor& x, int64_t axis, int64_t start, int64_t length) {
  axis = x.shape().normalize_axis(axis, "narrow");
  GPIPE_CHECK(start >= 0 && length >= 0 && start + length <= x.shape()[axis], "narrow: range [",
              start, ", ", start + length, ") is outside axis ", axis, " of shape ", x.shape());
  return slice(x, axis, start, start + length, 1);
}

Tensor expand(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  GPIPE_CHECK(shape.rank() >= x.rank(), "expand: cannot expand shape ", x.shape(), " to ", shape);
  const int64_t lead = shape.rank() - x.rank();
  std::vector<int64_t> strides(shape.rank(), 0);
  for (int64_t i = 0; i < x.rank(); ++i) {
    const int64_t d = x.shape()[i];
    GPIPE_CHECK(d == shape[lead + i] || d == 1, "expand: cannot expand shape ", x.shape(), " to ",
                shape, " (axis ", i, ": ", d, " vs ", shape[lead + i], ")");
    strides[lead + i] = d == 1 && shape[lead + i] != 1 ? 0 : x.strides()[i];
  }
  Tensor out = view_of(x, shape, strides, x.offset());
  const Shape in_shape = x.shape();
  record("expand", {x}, out, [in_shape](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{sum_to(g[0], in_shape)};
  });
  return out;
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  GPIPE_CHECK(x.rank() >= shape.rank(), "sum_to: cannot reduce shape ", x.shape(), " to ", shape);
  const int64_t lead = x.rank() - shape.rank();
  std::vector<int64_t> axes;
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (i < lead) {
      axes.push_back(i);
    } else if (shape[i - lead] == 1 && x.shape()[i] != 1) {
      axes.push_back(i);
    } else {
      GPIPE_CHECK(shape[i - lead] == x.shape()[i], "sum_to: cannot reduce shape ", x.shape(),
                  " to ", shape);
    }
  }
  return reshape(sum(x, axes, /*keepdim=*/true), shape.dims());
}

Tensor concat(const std::vector<Tensor>& xs, int64_t axis) {
  GPIPE_CHECK(!xs.empty(), "concat: no tensors given");
  // 16-bit tensors next to float32 or float64 ones are widened to that dtype.
  DType wide = DType::kFloat32;
  bool mixed = false;
  for (const Tensor& x : xs) {
    if (!x.defined()) continue;
    mixed = mixed || x.dtype() != xs[0].dtype();
    if (x.dtype() == DType::kFloat64) wide = DType::kFloat64;
  }
  if (mixed && std::all_of(xs.begin(), xs.end(), [](const Tensor& x) {
        return x.defined() && is_float_like(x.dtype());
      })) {
    std::vector<Tensor> same;
    for (const Tensor& x : xs) same.push_back(is_half(x.dtype()) ? cast(x, wide) : x);
    bool one = true;
    for (const Tensor& x : same) one = one && x.dtype() == same[0].dtype();
    if (one) return concat(same, axis);
  }
  const Tensor& first = xs[0];
  axis = first.shape().normalize_axis(axis, "concat");
  detail::check_same_dtype_device("concat", xs);
  std::vector<int64_t> dims = first.shape().dims();
  int64_t total = 0;
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < xs.size(); ++i) {
    GPIPE_CHECK(xs[i].rank() == first.rank(), "concat: tensor ", i, " has shape ", xs[i].shape(),
                ", tensor 0 has ", first.shape(), " (ranks differ)");
    for (int64_t d = 0; d < first.rank(); ++d)
      GPIPE_CHECK(d == axis || xs[i].shape()[d] == first.shape()[d], "concat: tensor ", i,
                  " has shape ", xs[i].shape(), ", tensor 0 has ", first.shape(),
                  " (sizes must match except on axis ", axis, ")");
    sizes.push_back(xs[i].shape()[axis]);
    total += sizes.back();
  }
  dims[axis] = total;
  Tensor out = Tensor::empty(Shape(dims), first.dtype(), first.device());
  int64_t at = 0;
  for (const Tensor& x : xs) {
    std::vector<int64_t> d = out.shape().dims();
    d[axis] = x.shape()[axis];
    Tensor window = view_of(out, Shape(d), out.strides(), at * out.strides()[axis]);
    window.copy_from(x);
    at += x.shape()[axis];
  }
  record("concat", xs, out, [sizes, axis](const std::vector<Tensor>& g) {
    std::vector<Tensor> grads;
    int64_t start = 0;
    for (int64_t s : sizes) {
      grads.push_back(narrow(g[0], axis, start, s));
      start += s;
    }
    return grads;
  });
  return out;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t axis) {
  axis = x.shape().normalize_axis(axis, "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    GPIPE_CHECK(s >= 0, "split: negative piece size ", s);
    total += s;
  }
  GPIPE_CHECK(total == x.shape()[axis], "split: piece sizes sum to ", total, " but axis ", axis,
              " of shape ", x.shape(), " has ", x.shape()[axis]);
  std::vector<Tensor> pieces;
  int64_t start = 0;
  for (int64_t s : sizes) {
    std::vector<int64_t> d = x.shape().dims();
    d[axis] = s;
    pieces.push_back(view_of(x, Shape(d), x.strides(), x.offset() + start * x.strides()[axis]));
    start += s;
  }
  std::vector<Tensor*> outs;
  for (Tensor& p : pieces) outs.push_back(&p);
  record("split", {x}, outs,
         [axis](const std::vector<Tensor>& g) { return std::vector<Tensor>{concat(g, axis)}; });
  return pieces;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t axis) {
  GPIPE_CHECK(chunks > 0, "chunk: number of chunks must be positive, got ", chunks);
  const int64_t n = x.shape()[x.shape().normalize_axis(axis, "chunk")];
  GPIPE_CHECK(chunks <= n, "chunk: cannot cut an axis of size ", n, " into ", chunks,
              " non-empty pieces");
  std::vector<int64_t> sizes(chunks, n / chunks);
  for (int64_t i = 0; i < n % chunks; ++i) ++sizes[i];
  return split(x, sizes, axis);
}

}  // namespace gpipe::ops
