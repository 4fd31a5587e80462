// masked_fill CPU kernel. The output is walked row by row (all axes but the
// last); each row finds its mask row from the mask view's strides once, then
// runs one tight loop whose mask stride is fixed (1 for a dense mask, 0 for
// a mask broadcast along the last axis, or a general stride).
#include <algorithm>

#include "ops/cpu/isa/prelude.h"  // this file is built per ISA level: Note [CPU ISA kernels]
#include "ops/mask_kernels.h"

namespace gpipe::ops::cpu::GPIPE_ISA_NS {
namespace {

constexpr int64_t kGrainElems = 1 << 15;

template <class T, class M>
void fill_row(const T* x, const M* m, int64_t ms, T value, T* out, int64_t n) {
  if (ms == 1) {
    for (int64_t i = 0; i < n; ++i) out[i] = m[i] != M(0) ? value : x[i];
  } else if (ms == 0) {
    if (*m != M(0)) {
      std::fill(out, out + n, value);
    } else {
      std::copy(x, x + n, out);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = m[i * ms] != M(0) ? value : x[i];
  }
}

template <class T, class M>
void masked_fill_impl(const Tensor& x, const Tensor& mask, T value, Tensor& out) {
  const int64_t numel = out.numel();
  if (numel == 0) return;
  const T* px = x.data<T>();
  const M* pm = mask.base<const M>();
  T* po = out.data<T>();
  const int64_t r = out.rank();
  if (r == 0) {
    po[0] = pm[mask.offset()] != M(0) ? value : px[0];
    return;
  }
  const Shape& shape = out.shape();
  const auto& ms = mask.strides();
  const int64_t inner = shape[r - 1];
  const int64_t rows = numel / inner;
  parallel_for(0, rows, std::max<int64_t>(1, kGrainElems / inner), [&](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row) {
      int64_t om = mask.offset(), rem = row;
      for (int64_t d = r - 2; d >= 0; --d) {
        om += (rem % shape[d]) * ms[d];
        rem /= shape[d];
      }
      fill_row(px + row * inner, pm + om, ms[r - 1], value, po + row * inner, inner);
    }
  });
}

void masked_fill_cpu(const Tensor& x, const Tensor& mask, double value, Tensor& out) {
  dispatch_floating(x.dtype(), "masked_fill", [&](auto z) {
    using T = decltype(z);
    const T v = static_cast<T>(value);
    switch (mask.dtype()) {
      case DType::kFloat32:
        return masked_fill_impl<T, float>(x, mask, v, out);
      case DType::kFloat64:
        return masked_fill_impl<T, double>(x, mask, v, out);
      case DType::kInt32:
        return masked_fill_impl<T, int32_t>(x, mask, v, out);
      case DType::kInt64:
        return masked_fill_impl<T, int64_t>(x, mask, v, out);
      default:
        isa_fail("masked_fill: the mask must be float32, float64, int32 or int64");
    }
  });
}

}  // namespace

GPIPE_ISA_KERNEL(masked_fill_apply, masked_fill_cpu);

}  // namespace gpipe::ops::cpu::GPIPE_ISA_NS
