// Reductions: one axis at a time through the [outer, n, inner] kernels, from
// the last requested axis to the first so earlier axis numbers stay valid.
#include "ops/reduce.h"

#include <algorithm>
#include <utility>

#include "ops/common.h"
#include "ops/elementwise.h"
#include "ops/reduce_kernels.h"
#include "ops/shape.h"

namespace gpipe::ops {
namespace {

Shape reduced_shape(const Shape& s, int64_t axis, bool keepdim) {
  std::vector<int64_t> d = s.dims();
  if (keepdim)
    d[axis] = 1;
  else
    d.erase(d.begin() + axis);
  return Shape(d);
}

// Sum over one axis, keepdim, no autograd.
Tensor sum_axis_raw(const Tensor& x, int64_t axis) {
  const AxisView v = axis_view(x.shape(), axis);
  Tensor out = Tensor::empty(reduced_shape(x.shape(), axis, true), x.dtype(), x.device());
  reduce_sum(x.device(), detail::dense(x), v.outer, v.n, v.inner, out);
  return out;
}

std::vector<int64_t> normalize_axes(const Tensor& x, std::vector<int64_t> axes, const char* op) {
  if (axes.empty())
    for (int64_t i = 0; i < x.rank(); ++i) axes.push_back(i);
  for (int64_t& a : axes) a = x.shape().normalize_axis(a, op);
  std::sort(axes.begin(), axes.end());
  GPIPE_CHECK(std::adjacent_find(axes.begin(), axes.end()) == axes.end(), op,
              ": an axis is listed twice");
  return axes;
}

}  // namespace

Tensor sum(const Tensor& x, std::vector<int64_t> axes, bool keepdim) {
  detail::check_floating("sum", x, "the input");
  axes = normalize_axes(x, axes, "sum");
  Tensor out;
  {
    NoGradGuard no_grad;
    if (static_cast<int64_t>(axes.size()) == x.rank() && x.rank() > 0) {
      Tensor flat = reshape(detail::dense(x), {1, x.numel(), 1});
      Tensor s = Tensor::empty(Shape{1, 1}, x.dtype(), x.device());
      reduce_sum(x.device(), flat, 1, x.numel(), 1, s);
      out = reshape(s, std::vector<int64_t>(x.rank(), 1));
    } else {
      out = x;
      for (auto it = axes.rbegin(); it != axes.rend(); ++it) out = sum_axis_raw(out, *it);
      if (axes.empty()) out = x.clone();
    }
    if (!keepdim) {
      std::vector<int64_t> d;
      for (int64_t i = 0; i < x.rank(); ++i)
        if (!std::binary_search(axes.begin(), axes.end(), i)) d.push_back(x.shape()[i]);
      out = reshape(out, d);
    }
  }
  const Shape in_shape = x.shape();
  record("sum", {x}, out, [in_shape, axes](const std::vector<Tensor>& g) {
    std::vector<int64_t> kd = in_shape.dims();
    for (int64_t a : axes) kd[a] = 1;
    return std::vector<Tensor>{expand(reshape(g[0], kd), in_shape).contiguous()};
  });
  return out;
}

Tensor mean(const Tensor& x, std::vector<int64_t> axes, bool keepdim) {
  detail::check_floating("mean", x, "the input");
  axes = normalize_axes(x, axes, "mean");
  int64_t count = 1;
  for (int64_t a : axes) count *= x.shape()[a];
  GPIPE_CHECK(count > 0, "mean: reducing over an empty axis of shape ", x.shape());
  return mul_scalar(sum(x, axes, keepdim), 1.0 / static_cast<double>(count));
}

Tensor max(const Tensor& x, int64_t axis, bool keepdim) {
  detail::check_floating("max", x, "the input");
  axis = x.shape().normalize_axis(axis, "max");
  GPIPE_CHECK(x.shape()[axis] > 0, "max: axis ", axis, " of shape ", x.shape(), " is empty");
  const AxisView v = axis_view(x.shape(), axis);
  Tensor out = Tensor::empty(reduced_shape(x.shape(), axis, keepdim), x.dtype(), x.device());
  Tensor idx = Tensor::empty(out.shape(), DType::kInt64, x.device());
  reduce_max(x.device(), detail::dense(x), v.outer, v.n, v.inner, out, idx);
  const Shape in_shape = x.shape();
  record("max", {x}, out, [v, in_shape, idx](const std::vector<Tensor>& g) {
    Tensor gx = Tensor::empty(in_shape, g[0].dtype(), g[0].device());
    reduce_max_backward(gx.device(), detail::dense(g[0]), idx, v.outer, v.n, v.inner, gx);
    return std::vector<Tensor>{gx};
  });
  return out;
}

Tensor argmax(const Tensor& x, int64_t axis, bool keepdim) {
  detail::check_floating("argmax", x, "the input");
  axis = x.shape().normalize_axis(axis, "argmax");
  GPIPE_CHECK(x.shape()[axis] > 0, "argmax: axis ", axis, " of shape ", x.shape(), " is empty");
  const AxisView v = axis_view(x.shape(), axis);
  Tensor out = Tensor::empty(reduced_shape(x.shape(), axis, keepdim), x.dtype(), x.device());
  Tensor idx = Tensor::empty(out.shape(), DType::kInt64, x.device());
  reduce_max(x.device(), detail::dense(x), v.outer, v.n, v.inner, out, idx);
  return idx;
}

double sum_of_squares(const std::vector<Tensor>& tensors, const char* what) {
  NoGradGuard no_grad;
  std::vector<double> sums(tensors.size(), 0.0);
  // Per device: the positions of its tensors, reduced into one float64 vector there.
  std::vector<std::pair<Device, std::vector<size_t>>> by_device;  // in order of appearance
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (!t.defined()) continue;
    GPIPE_CHECK(is_float_like(t.dtype()), what, ": tensor ", i, " has dtype ", t.dtype(),
                "; expected float32, float64, bfloat16 or float16");
    if (t.numel() == 0) continue;
    auto it = std::find_if(by_device.begin(), by_device.end(),
                           [&](const auto& d) { return d.first == t.device(); });
    if (it == by_device.end()) it = by_device.insert(by_device.end(), {t.device(), {}});
    it->second.push_back(i);
  }
  for (const auto& [device, positions] : by_device) {
    Tensor out =
        Tensor::zeros(Shape{static_cast<int64_t>(positions.size())}, DType::kFloat64, device);
    if (sum_squares_many.has(device.type)) {  // all of the device's tensors in a few launches
      std::vector<Tensor> xs;
      for (size_t k : positions) xs.push_back(tensors[k].contiguous());
      sum_squares_many(device, xs, out);
    } else {
      for (size_t k = 0; k < positions.size(); ++k)
        sum_squares_into(device, tensors[positions[k]].contiguous(), out, static_cast<int64_t>(k));
    }
    const std::vector<double> host = out.to_vector<double>();
    for (size_t k = 0; k < positions.size(); ++k) sums[positions[k]] = host[k];
  }
  double total = 0.0;
  for (double s : sums) total += s;
  return total;
}

}  // namespace gpipe::ops
