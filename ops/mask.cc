// Mask fronts. masked_fill broadcasts the mask with a zero-stride view (no
// copy of the mask at x's size) and reuses its kernel for the gradient:
// grad_x = masked_fill(grad_y, mask, 0). The mask builders are creation ops
// that fill small tensors on the CPU.
#include "ops/mask.h"

#include "core/autograd.h"
#include "ops/common.h"
#include "ops/mask_kernels.h"

namespace gpipe::ops {
namespace {

// A view of `mask` with x's shape: missing leading axes and size-1 axes get
// stride 0. Throws unless mask broadcasts to `shape` without enlarging it.
Tensor broadcast_mask(const Tensor& mask, const Shape& shape) {
  const int64_t r = shape.rank(), mr = mask.rank();
  bool ok = mr <= r;
  std::vector<int64_t> strides(r, 0);
  for (int64_t d = 0; ok && d < mr; ++d) {
    const int64_t xd = r - mr + d;
    const int64_t m = mask.shape()[d];
    if (m == shape[xd]) {
      strides[xd] = mask.strides()[d];
    } else if (m != 1) {
      ok = false;
    }
  }
  GPIPE_CHECK(ok, "masked_fill: mask of shape ", mask.shape(),
              " does not broadcast to the input's shape ", shape);
  return Tensor::make_view(mask, shape, strides, mask.offset());
}

}  // namespace

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  detail::check_floating("masked_fill", x, "the input");
  GPIPE_CHECK(mask.defined(), "masked_fill: mask is an undefined tensor");
  GPIPE_CHECK(is_float_like(mask.dtype()) || is_integral(mask.dtype()),
              "masked_fill: expected a float32/float64/bfloat16/float16/int32/int64 mask, got ",
              mask.dtype());
  GPIPE_CHECK(mask.device() == x.device(), "masked_fill: mask is on ", mask.device(),
              " but the input is on ", x.device());
  const Tensor mv = broadcast_mask(mask.detach(), x.shape());
  const Tensor xd = detail::dense(x);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  masked_fill_apply(x.device(), xd, mv, value, out);
  record("masked_fill", {x}, out, [mv](const std::vector<Tensor>& g) {
    const Tensor gy = detail::dense(g[0]);
    Tensor gx = Tensor::empty(gy.shape(), gy.dtype(), gy.device());
    masked_fill_apply(gy.device(), gy, mv, 0.0, gx);
    return std::vector<Tensor>{gx};
  });
  return out;
}

Tensor causal_mask(int64_t t_q, int64_t t_k, DType dtype) {
  GPIPE_CHECK(t_q >= 0 && t_k >= 0, "causal_mask: sizes must be >= 0, got t_q = ", t_q,
              ", t_k = ", t_k);
  Tensor m = Tensor::zeros({t_q, t_k}, DType::kFloat64);
  double* p = m.data<double>();
  for (int64_t i = 0; i < t_q; ++i)
    for (int64_t j = i + 1; j < t_k; ++j) p[i * t_k + j] = 1.0;
  return dtype == DType::kFloat64 ? m : m.to(dtype);
}

Tensor padding_mask(const Tensor& lengths, int64_t t_k, DType dtype) {
  GPIPE_CHECK(lengths.defined(), "padding_mask: lengths is an undefined tensor");
  GPIPE_CHECK(lengths.rank() == 1 && is_integral(lengths.dtype()),
              "padding_mask: expected lengths [B] of int32/int64, got ", lengths.dtype(), " ",
              lengths.shape());
  GPIPE_CHECK(t_k >= 0, "padding_mask: t_k must be >= 0, got ", t_k);
  const std::vector<int64_t> len = lengths.to(kCpu).to_vector<int64_t>();
  const int64_t b = static_cast<int64_t>(len.size());
  Tensor m = Tensor::zeros({b, 1, 1, t_k}, DType::kFloat64);
  double* p = m.data<double>();
  for (int64_t i = 0; i < b; ++i) {
    GPIPE_CHECK(len[i] >= 0 && len[i] <= t_k, "padding_mask: lengths[", i, "] = ", len[i],
                " is outside [0, t_k = ", t_k, "]");
    for (int64_t j = len[i]; j < t_k; ++j) p[i * t_k + j] = 1.0;
  }
  Tensor out = dtype == DType::kFloat64 ? m : m.to(dtype);
  return out.to(lengths.device());
}

}  // namespace gpipe::ops
