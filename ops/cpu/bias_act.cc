// Fused bias + activation CPU kernels (ops::bias_activation), compiled per
// ISA level. Forward: one pass y = act(z + bias) over each row. Backward: one
// pass computes gz = g * act'(.) and, when asked, the bias gradient's column
// sums: the rows are cut into a number of chunks that depends only on the
// shape, each chunk sums its rows in double into its own partial row, and the
// partials are added in chunk order (as layer norm does), so the result does
// not depend on the thread count.
#include <cmath>

#include "ops/cpu/isa/prelude.h"  // this file is built per ISA level: Note [CPU ISA kernels]
#include "ops/elementwise_kernels.h"

namespace gpipe::ops::cpu::GPIPE_ISA_NS {
namespace {

constexpr int64_t kGrainElems = 1 << 14;
constexpr int64_t kMaxChunks = 32;

template <FusedActivation kAct, class T>
inline T apply(T u) {
  if constexpr (kAct == FusedActivation::kRelu) return u > T(0) ? u : T(0);
  if constexpr (kAct == FusedActivation::kGelu) return gelu_value(u);
  if constexpr (kAct == FusedActivation::kGeluTanh) return gelu_tanh_value(u);
  if constexpr (kAct == FusedActivation::kSilu) return silu_value(u);
  if constexpr (kAct == FusedActivation::kTanh) return std::tanh(u);
  if constexpr (kAct == FusedActivation::kSigmoid) return T(1) / (T(1) + std::exp(-u));
  return u;
}

// act'(u), from the output y (relu, tanh, sigmoid, none) or u (the GELUs).
template <FusedActivation kAct, class T>
inline T derivative(T u, T y) {
  if constexpr (kAct == FusedActivation::kRelu) return static_cast<T>(y > T(0));
  if constexpr (kAct == FusedActivation::kGelu) return gelu_grad(u);
  if constexpr (kAct == FusedActivation::kGeluTanh) return gelu_tanh_grad(u);
  if constexpr (kAct == FusedActivation::kSilu) return silu_grad(u);
  if constexpr (kAct == FusedActivation::kTanh) return T(1) - y * y;
  if constexpr (kAct == FusedActivation::kSigmoid) return y * (T(1) - y);
  return T(1);
}

// The GELUs and SiLU over a row (prelude.h's vectorised forms).
template <FusedActivation kAct, class T>
void act_rows(const T* u, T* y, int64_t n) {
  if constexpr (kAct == FusedActivation::kGelu)
    gelu_rows(u, y, n);
  else if constexpr (kAct == FusedActivation::kGeluTanh)
    gelu_tanh_rows(u, y, n);
  else
    silu_rows(u, y, n);
}
template <FusedActivation kAct, class T>
void act_grad_rows(const T* u, const T* gy, T* gx, int64_t n) {
  if constexpr (kAct == FusedActivation::kGelu)
    gelu_grad_rows(u, gy, gx, n);
  else if constexpr (kAct == FusedActivation::kGeluTanh)
    gelu_tanh_grad_rows(u, gy, gx, n);
  else
    silu_grad_rows(u, gy, gx, n);
}

template <FusedActivation kAct, class T>
void forward_rows(const T* z, const T* bias, T* y, int64_t n, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const T* zr = z + r * n;
    T* yr = y + r * n;
    if constexpr (derivative_from_input(kAct)) {  // vectorised erf / tanh over the row
      if (bias) {
        for (int64_t i = 0; i < n; ++i) yr[i] = zr[i] + bias[i];
        act_rows<kAct>(yr, yr, n);
      } else {
        act_rows<kAct>(zr, yr, n);
      }
      continue;
    }
    if (bias) {
      for (int64_t i = 0; i < n; ++i) yr[i] = apply<kAct>(zr[i] + bias[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) yr[i] = apply<kAct>(zr[i]);
    }
  }
}

// Rows [r0, r1): gz (if any) and their column sums added into sum (if any).
template <FusedActivation kAct, class T>
void backward_rows(const T* z, const T* bias, const T* y, const T* g, T* gz, double* sum, int64_t n,
                   int64_t r0, int64_t r1, T* scratch) {
  for (int64_t r = r0; r < r1; ++r) {
    const T* gr = g + r * n;
    if (kAct == FusedActivation::kNone && !gz) {  // the bias gradient alone: sum g itself
      for (int64_t i = 0; i < n; ++i) sum[i] += static_cast<double>(gr[i]);
      continue;
    }
    T* out = gz ? gz + r * n : scratch;
    if constexpr (derivative_from_input(kAct)) {
      const T* zr = z + r * n;
      if (bias) {
        for (int64_t i = 0; i < n; ++i) out[i] = zr[i] + bias[i];  // u, then gy * act'(u) in place
        act_grad_rows<kAct>(out, gr, out, n);
      } else {
        act_grad_rows<kAct>(zr, gr, out, n);
      }
    } else if constexpr (kAct == FusedActivation::kNone) {
      for (int64_t i = 0; i < n; ++i) out[i] = gr[i];
    } else {
      const T* yr = y + r * n;
      for (int64_t i = 0; i < n; ++i) out[i] = gr[i] * derivative<kAct>(T(0), yr[i]);
    }
    if (sum)
      for (int64_t i = 0; i < n; ++i) sum[i] += static_cast<double>(out[i]);
  }
}

template <FusedActivation kAct, class T>
void forward_impl(const Tensor& z, const Tensor& bias, Tensor& y) {
  const int64_t n = z.rank() == 0 ? 1 : z.size(-1);
  const int64_t rows = n == 0 ? 0 : z.numel() / n;
  const T* pz = z.data<T>();
  const T* pb = bias.defined() ? bias.data<T>() : nullptr;
  T* py = y.data<T>();
  parallel_for(0, rows, std::max<int64_t>(1, kGrainElems / std::max<int64_t>(n, 1)),
               [&](int64_t lo, int64_t hi) { forward_rows<kAct>(pz, pb, py, n, lo, hi); });
}

template <FusedActivation kAct, class T>
void backward_impl(const Tensor& z, const Tensor& bias, const Tensor& y, const Tensor& g,
                   Tensor& gz, Tensor& gbias) {
  const int64_t n = g.rank() == 0 ? 1 : g.size(-1);
  const int64_t rows = n == 0 ? 0 : g.numel() / n;
  const T* pz = z.defined() ? z.data<T>() : nullptr;
  const T* pb = bias.defined() ? bias.data<T>() : nullptr;
  const T* py = y.defined() ? y.data<T>() : nullptr;
  const T* pg = g.data<T>();
  T* pgz = gz.defined() ? gz.data<T>() : nullptr;
  T* pgb = gbias.defined() ? gbias.data<T>() : nullptr;
  if (!pgb) {
    if (!pgz) return;  // nothing asked for
    parallel_for(0, rows, std::max<int64_t>(1, kGrainElems / std::max<int64_t>(n, 1)),
                 [&](int64_t lo, int64_t hi) {
                   backward_rows<kAct, T>(pz, pb, py, pg, pgz, nullptr, n, lo, hi, nullptr);
                 });
    return;
  }
  // Fixed partition of the rows (see the file comment).
  const int64_t chunks = std::clamp<int64_t>((rows * n + kGrainElems - 1) / kGrainElems, 1,
                                             std::max<int64_t>(1, std::min(rows, kMaxChunks)));
  vector<double> partial(static_cast<size_t>(chunks * n), 0.0);
  parallel_for(0, chunks, 1, [&](int64_t clo, int64_t chi) {
    vector<T> scratch(pgz ? 0 : n);
    for (int64_t c = clo; c < chi; ++c)
      backward_rows<kAct, T>(pz, pb, py, pg, pgz, partial.data() + c * n, n, c * rows / chunks,
                             (c + 1) * rows / chunks, scratch.data());
  });
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int64_t c = 0; c < chunks; ++c) s += partial[c * n + i];
    pgb[i] = static_cast<T>(s);
  }
}

// Note [16-bit kernels] (ops/dispatch.h): a bfloat16 / float16 z, y, g
// and gz are read a row at a time into float32 buffers, the float32 rows
// above run on them, and each output row is rounded once; the bias (float32
// or 16-bit) and its gradient (the bias's dtype) go through float32 as
// well. The same arithmetic, in the same order, as the float32 kernel on
// widened copies, without the copies.
template <class T>
const float* float_params(const Tensor& t, int64_t n, vector<float>& buf) {
  if (!t.defined()) return nullptr;
  if (t.dtype() == DType::kFloat32) return t.data<float>();
  return widen_row(t.data<T>(), n, buf);
}

template <FusedActivation kAct, class T>
void forward_impl_16(const Tensor& z, const Tensor& bias, Tensor& y) {
  const int64_t n = z.rank() == 0 ? 1 : z.size(-1);
  const int64_t rows = n == 0 ? 0 : z.numel() / n;
  vector<float> bias_buf;
  const float* pb = float_params<T>(bias, n, bias_buf);
  const T* pz = z.data<T>();
  T* py = y.data<T>();
  parallel_for(0, rows, std::max<int64_t>(1, kGrainElems / std::max<int64_t>(n, 1)),
               [&](int64_t lo, int64_t hi) {
                 vector<float> zb, yb(static_cast<size_t>(n));
                 for (int64_t r = lo; r < hi; ++r) {
                   forward_rows<kAct>(widen_row(pz + r * n, n, zb), pb, yb.data(), n, 0, 1);
                   narrow_row(yb.data(), py + r * n, n);
                 }
               });
}

template <FusedActivation kAct, class T>
void backward_impl_16(const Tensor& z, const Tensor& bias, const Tensor& y, const Tensor& g,
                      Tensor& gz, Tensor& gbias) {
  const int64_t n = g.rank() == 0 ? 1 : g.size(-1);
  const int64_t rows = n == 0 ? 0 : g.numel() / n;
  vector<float> bias_buf;
  const float* pb = float_params<T>(bias, n, bias_buf);
  const T* pz = z.defined() ? z.data<T>() : nullptr;
  const T* py = y.defined() ? y.data<T>() : nullptr;
  const T* pg = g.data<T>();
  T* pgz = gz.defined() ? gz.data<T>() : nullptr;
  const bool want_bias = gbias.defined();
  if (!want_bias && !pgz) return;
  // Rows [r0, r1) into `sum` (if any), each row's gz rounded into pgz (if any).
  auto run_rows = [&](int64_t r0, int64_t r1, double* sum) {
    vector<float> zb, yb, gb, out(static_cast<size_t>(n));
    for (int64_t r = r0; r < r1; ++r) {
      const float* zr = pz ? widen_row(pz + r * n, n, zb) : nullptr;
      const float* yr = py ? widen_row(py + r * n, n, yb) : nullptr;
      backward_rows<kAct, float>(zr, pb, yr, widen_row(pg + r * n, n, gb), out.data(), sum, n, 0, 1,
                                 nullptr);
      if (pgz) narrow_row(out.data(), pgz + r * n, n);
    }
  };
  if (!want_bias) {
    parallel_for(0, rows, std::max<int64_t>(1, kGrainElems / std::max<int64_t>(n, 1)),
                 [&](int64_t lo, int64_t hi) { run_rows(lo, hi, nullptr); });
    return;
  }
  // The float32 kernel's fixed partition of the rows.
  const int64_t chunks = std::clamp<int64_t>((rows * n + kGrainElems - 1) / kGrainElems, 1,
                                             std::max<int64_t>(1, std::min(rows, kMaxChunks)));
  vector<double> partial(static_cast<size_t>(chunks * n), 0.0);
  parallel_for(0, chunks, 1, [&](int64_t clo, int64_t chi) {
    for (int64_t c = clo; c < chi; ++c)
      run_rows(c * rows / chunks, (c + 1) * rows / chunks, partial.data() + c * n);
  });
  for (int64_t i = 0; i < n; ++i) {
    double sum = 0;
    for (int64_t c = 0; c < chunks; ++c) sum += partial[c * n + i];
    if (gbias.dtype() == DType::kFloat32)
      gbias.data<float>()[i] = static_cast<float>(sum);
    else
      store_float(gbias.data<T>(), i, static_cast<float>(sum));
  }
}

template <class F>
void dispatch_act(FusedActivation act, F&& f) {
  switch (act) {
    case FusedActivation::kNone:
      return f(std::integral_constant<FusedActivation, FusedActivation::kNone>{});
    case FusedActivation::kRelu:
      return f(std::integral_constant<FusedActivation, FusedActivation::kRelu>{});
    case FusedActivation::kGelu:
      return f(std::integral_constant<FusedActivation, FusedActivation::kGelu>{});
    case FusedActivation::kTanh:
      return f(std::integral_constant<FusedActivation, FusedActivation::kTanh>{});
    case FusedActivation::kSigmoid:
      return f(std::integral_constant<FusedActivation, FusedActivation::kSigmoid>{});
    case FusedActivation::kGeluTanh:
      return f(std::integral_constant<FusedActivation, FusedActivation::kGeluTanh>{});
    case FusedActivation::kSilu:
      return f(std::integral_constant<FusedActivation, FusedActivation::kSilu>{});
  }
}

void bias_act_forward_cpu(FusedActivation act, const Tensor& z, const Tensor& bias, Tensor& y) {
  dispatch_floating_16(z.dtype(), "bias_activation", [&](auto zero) {
    using T = decltype(zero);
    dispatch_act(act, [&](auto a) {
      if constexpr (is_16bit_v<T>)
        forward_impl_16<decltype(a)::value, T>(z, bias, y);
      else
        forward_impl<decltype(a)::value, T>(z, bias, y);
    });
  });
}

void bias_act_backward_cpu(FusedActivation act, const Tensor& z, const Tensor& bias,
                           const Tensor& y, const Tensor& g, Tensor& gz, Tensor& gbias) {
  dispatch_floating_16(g.dtype(), "bias_activation backward", [&](auto zero) {
    using T = decltype(zero);
    dispatch_act(act, [&](auto a) {
      if constexpr (is_16bit_v<T>)
        backward_impl_16<decltype(a)::value, T>(z, bias, y, g, gz, gbias);
      else
        backward_impl<decltype(a)::value, T>(z, bias, y, g, gz, gbias);
    });
  });
}

}  // namespace

GPIPE_ISA_KERNEL(bias_act_forward, bias_act_forward_cpu);
GPIPE_ISA_KERNEL(bias_act_backward, bias_act_backward_cpu);

}  // namespace gpipe::ops::cpu::GPIPE_ISA_NS
