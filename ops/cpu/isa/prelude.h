// Included by every CPU kernel file compiled once per ISA level
// (Note [CPU ISA kernels] in ops/cpu/isa/abi.h). It opens nothing: the file
// then writes `namespace gpipe::ops::cpu::GPIPE_ISA_NS { ... }` and inside it
// finds the small Tensor, Shape, parallel_for, dispatch_floating and vector
// defined here, which shadow gpipe's own. Everything here is defined in the
// ISA namespace, so its instantiations are that level's alone.
#pragma once

#if !defined(GPIPE_ISA_NS) || !defined(GPIPE_ISA_EIGEN_NS)
#error "per-ISA kernel files are compiled by ops/BUILD with -DGPIPE_ISA_NS and -DGPIPE_ISA_EIGEN_NS"
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <new>
#include <tuple>
#include <type_traits>
#include <vector>

#include "ops/cpu/isa/abi.h"

// Eigen, in this level's own namespace (its templates compile differently per ISA).
#define Eigen GPIPE_ISA_EIGEN_NS
#include <Eigen/Core>
#include <unsupported/Eigen/SpecialFunctions>  // the vectorised erf of gelu_rows

namespace gpipe::ops::cpu::GPIPE_ISA_NS {

// gpipe::DType's values (isa_dispatch.cc checks they agree). A local type, so
// that overloads taking it never meet gpipe's through argument lookup.
enum class DType : uint8_t { kFloat32, kFloat64, kInt32, kInt64, kBFloat16, kFloat16 };

// A view's shape or strides.
class Dims {
 public:
  Dims(const int64_t* d, int64_t rank) : d_(d), rank_(rank) {}
  int64_t rank() const { return rank_; }
  int64_t operator[](int64_t i) const { return d_[i]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t i = 0; i < rank_; ++i) n *= d_[i];
    return n;
  }
  bool operator==(const Dims& o) const {
    if (rank_ != o.rank_) return false;
    for (int64_t i = 0; i < rank_; ++i)
      if (d_[i] != o.d_[i]) return false;
    return true;
  }
  bool operator!=(const Dims& o) const { return !(*this == o); }

 private:
  const int64_t* d_;
  int64_t rank_;
};
using Shape = Dims;

struct AxisView {
  int64_t outer = 1, n = 1, inner = 1;
};
inline AxisView axis_view(const Shape& s, int64_t axis) {
  AxisView v;
  for (int64_t i = 0; i < axis; ++i) v.outer *= s[i];
  v.n = s[axis];
  for (int64_t i = axis + 1; i < s.rank(); ++i) v.inner *= s[i];
  return v;
}

// The exact GELU, x * Phi(x), and its derivative (elementwise and the fused
// bias + activation share them).
template <class T>
inline T gelu_value(T x) {
  return T(0.5) * x * (T(1) + std::erf(x * T(0.70710678118654752440)));
}
template <class T>
inline T gelu_grad(T x) {
  const T cdf = T(0.5) * (T(1) + std::erf(x * T(0.70710678118654752440)));
  const T pdf = std::exp(T(-0.5) * x * x) * T(0.39894228040143267794);
  return cdf + x * pdf;
}

// The same over n contiguous elements: y = gelu(u), and gx = gy * gelu'(u)
// (gx may alias u or gy, y may alias u). float goes through Eigen's packet erf
// and exp (a rational erf accurate to a few ulp, vectorised at this level's
// width: the scalar std::erf costs 3 ns an element); double keeps std::erf,
// elementwise.
template <class T>
void gelu_rows(const T* u, T* y, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    using A = Eigen::Array<float, Eigen::Dynamic, 1>;
    const Eigen::Map<const A> x(u, n);
    Eigen::Map<A>(y, n) = 0.5f * x * (1.0f + (x * 0.70710678118654752440f).erf());
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = gelu_value(u[i]);
  }
}
template <class T>
void gelu_grad_rows(const T* u, const T* gy, T* gx, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    using A = Eigen::Array<float, Eigen::Dynamic, 1>;
    const Eigen::Map<const A> x(u, n);
    const auto cdf = 0.5f * (1.0f + (x * 0.70710678118654752440f).erf());
    const auto pdf = (-0.5f * x.square()).exp() * 0.39894228040143267794f;
    Eigen::Map<A>(gx, n) = Eigen::Map<const A>(gy, n) * (cdf + x * pdf);
  } else {
    for (int64_t i = 0; i < n; ++i) gx[i] = gy[i] * gelu_grad(u[i]);
  }
}

// GPT-2's GELU, 0.5 x (1 + tanh(k (x + c x^3))) with k = sqrt(2 / pi) and
// c = 0.044715, and its derivative 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2).
template <class T>
inline T gelu_tanh_value(T x) {
  const T t = std::tanh(T(0.79788456080286535588) * (x + T(0.044715) * x * x * x));
  return T(0.5) * x * (T(1) + t);
}
template <class T>
inline T gelu_tanh_grad(T x) {
  const T k = T(0.79788456080286535588), c = T(0.044715);
  const T t = std::tanh(k * (x + c * x * x * x));
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * k * (T(1) + T(3) * c * x * x);
}
// Over n contiguous elements (the aliasing of gelu_rows); float through
// Eigen's vectorised tanh, double elementwise.
template <class T>
void gelu_tanh_rows(const T* u, T* y, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    using A = Eigen::Array<float, Eigen::Dynamic, 1>;
    const Eigen::Map<const A> x(u, n);
    Eigen::Map<A>(y, n) =
        0.5f * x * (1.0f + (0.79788456080286535588f * (x + 0.044715f * x.cube())).tanh());
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = gelu_tanh_value(u[i]);
  }
}
template <class T>
void gelu_tanh_grad_rows(const T* u, const T* gy, T* gx, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    using A = Eigen::Array<float, Eigen::Dynamic, 1>;
    const Eigen::Map<const A> x(u, n);
    const float k = 0.79788456080286535588f, c = 0.044715f;
    const A t = (k * (x + c * x.cube())).tanh();
    Eigen::Map<A>(gx, n) =
        Eigen::Map<const A>(gy, n) *
        (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t.square()) * k * (1.0f + 3.0f * c * x.square()));
  } else {
    for (int64_t i = 0; i < n; ++i) gx[i] = gy[i] * gelu_tanh_grad(u[i]);
  }
}

// SiLU, x sigmoid(x), and its derivative s (1 + x (1 - s)).
template <class T>
inline T silu_value(T x) {
  return x / (T(1) + std::exp(-x));
}
template <class T>
inline T silu_grad(T x) {
  const T s = T(1) / (T(1) + std::exp(-x));
  return s * (T(1) + x * (T(1) - s));
}
template <class T>
void silu_rows(const T* u, T* y, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    using A = Eigen::Array<float, Eigen::Dynamic, 1>;
    const Eigen::Map<const A> x(u, n);
    Eigen::Map<A>(y, n) = x / (1.0f + (-x).exp());
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = silu_value(u[i]);
  }
}
template <class T>
void silu_grad_rows(const T* u, const T* gy, T* gx, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    using A = Eigen::Array<float, Eigen::Dynamic, 1>;
    const Eigen::Map<const A> x(u, n);
    const A s = 1.0f / (1.0f + (-x).exp());
    Eigen::Map<A>(gx, n) = Eigen::Map<const A>(gy, n) * (s * (1.0f + x * (1.0f - s)));
  } else {
    for (int64_t i = 0; i < n; ++i) gx[i] = gy[i] * silu_grad(u[i]);
  }
}

// 16-bit float elements (raw bits) and their conversions, this level's own copy.
struct bfloat16 {
  uint16_t bits;
};
struct float16 {
  uint16_t bits;
};
#include "core/half_convert.inc"

template <class T>
constexpr bool is_16bit_v = std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>;
// The type a kernel computes in for elements of type T: float32 for 16-bit ones.
template <class T>
using compute_t = std::conditional_t<is_16bit_v<T>, float, T>;

// One element as float32 (exact for 16-bit and float32 elements).
template <class T>
float load_float(const T* p, int64_t i) {
  if constexpr (std::is_same_v<T, bfloat16>)
    return bf16_bits_to_float(p[i].bits);
  else if constexpr (std::is_same_v<T, float16>)
    return f16_bits_to_float(p[i].bits);
  else
    return static_cast<float>(p[i]);
}
// Stores v, rounded to nearest-even for 16-bit elements.
template <class T>
void store_float(T* p, int64_t i, float v) {
  if constexpr (std::is_same_v<T, bfloat16>)
    p[i].bits = float_to_bf16_bits(v);
  else if constexpr (std::is_same_v<T, float16>)
    p[i].bits = float_to_f16_bits(v);
  else
    p[i] = static_cast<T>(v);
}

// n float32 values into a row of T elements, each rounded once (stored as
// they are for float32).
template <class T>
void narrow_row(const float* src, T* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) store_float(dst, i, src[i]);
}

// n elements of type T as compute_t<T>: the row itself, or its widened copy
// in `buf` (resized to n) for 16-bit elements.
template <class T, class Buf>
const compute_t<T>* widen_row(const T* row, int64_t n, Buf& buf) {
  if constexpr (is_16bit_v<T>) {
    buf.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) buf[i] = load_float(row, i);
    return buf.data();
  } else {
    return row;
  }
}

template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::kFloat32;
  if constexpr (std::is_same_v<T, double>) return DType::kFloat64;
  if constexpr (std::is_same_v<T, int32_t>) return DType::kInt32;
  if constexpr (std::is_same_v<T, int64_t>) return DType::kInt64;
  if constexpr (std::is_same_v<T, bfloat16>) return DType::kBFloat16;
  if constexpr (std::is_same_v<T, float16>) return DType::kFloat16;
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> ||
                    std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t> ||
                    std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>,
                "CPU kernels read float32, float64, int32, int64, bfloat16 or float16 tensors");
  return DType::kFloat32;
}

// A non-owning tensor over a TensorView (valid for the kernel call).
class Tensor {
 public:
  explicit Tensor(const TensorView& v) : v_(&v) {}
  bool defined() const { return v_->base != nullptr; }
  DType dtype() const { return static_cast<DType>(v_->dtype); }
  int64_t numel() const { return v_->numel; }
  int64_t rank() const { return v_->rank; }
  Shape shape() const { return Shape(v_->shape, v_->rank); }
  Dims strides() const { return Dims(v_->strides, v_->rank); }
  int64_t offset() const { return v_->offset; }
  bool is_contiguous() const { return v_->contiguous; }
  int64_t size(int64_t axis) const { return v_->shape[axis < 0 ? axis + v_->rank : axis]; }
  int32_t device() const { return v_->device; }
  // Bytes of a contiguous tensor's elements.
  size_t nbytes() const { return static_cast<size_t>(v_->numel) * dtype_bytes(); }
  // Element (0, 0, ...). Throws (isa_fail) unless the tensor's dtype is T, as
  // gpipe's Tensor::data<T> does: a kernel dispatches on one tensor's dtype
  // and reads the others as that type.
  template <class T>
  T* data() const {
    return base<T>() + v_->offset;
  }
  // The storage's first element, for views addressed with offset() and strides().
  template <class T>
  T* base() const {
    if (v_->dtype != static_cast<uint8_t>(dtype_of<std::remove_const_t<T>>()))
      isa_fail("a CPU kernel was given tensors of different dtypes (each must match the first)");
    return static_cast<T*>(v_->base);
  }

 private:
  size_t dtype_bytes() const {
    switch (dtype()) {
      case DType::kFloat64:
      case DType::kInt64:
        return 8;
      case DType::kBFloat16:
      case DType::kFloat16:
        return 2;
      default:
        return 4;
    }
  }

  const TensorView* v_;
};

template <class F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f) {
  isa_parallel_for(
      begin, end, grain,
      [](void* ctx, int64_t lo, int64_t hi) { (*static_cast<const F*>(ctx))(lo, hi); },
      const_cast<F*>(&f));
}
inline int intra_op_threads() { return isa_intra_op_threads(); }

template <class F>
decltype(auto) dispatch_floating(DType dtype, const char* op, F&& f) {
  if (dtype == DType::kFloat32) return f(float{});
  if (dtype != DType::kFloat64) isa_fail_dtype(op, static_cast<uint8_t>(dtype), false);
  return f(double{});
}
// float32, float64, bfloat16 or float16: kernels that compute on 16-bit
// tensors themselves (Note [16-bit kernels] in ops/dispatch.h).
template <class F>
decltype(auto) dispatch_floating_16(DType dtype, const char* op, F&& f) {
  if (dtype == DType::kBFloat16) return f(bfloat16{});
  if (dtype == DType::kFloat16) return f(float16{});
  return dispatch_floating(dtype, op, f);
}
template <class F>
decltype(auto) dispatch_index(DType dtype, const char* op, F&& f) {
  if (dtype == DType::kInt64) return f(int64_t{});
  if (dtype != DType::kInt32) isa_fail_dtype(op, static_cast<uint8_t>(dtype), true);
  return f(int32_t{});
}

// std::vector with this level's own allocator type, so that its member
// functions are this level's instantiations; 64-byte aligned, as tensors
// are. Eigen's vectorised reductions (sum, dot) over a buffer they cannot
// prove aligned add the elements before the first aligned vector one at a
// time: with malloc's 16-byte alignment a kernel's scratch rows summed in an
// order that depended on where the heap put each task's buffer, and bf16
// attention's probabilities differed between runs and thread counts.
template <class T>
struct Alloc {
  using value_type = T;
  static constexpr std::align_val_t kAlign{64};
  Alloc() = default;
  template <class U>
  Alloc(const Alloc<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlign)); }
  void deallocate(T* p, size_t) { ::operator delete(p, kAlign); }
  template <class U>
  bool operator==(const Alloc<U>&) const {
    return true;
  }
};
template <class T>
using vector = std::vector<T, Alloc<T>>;

// Scratch from the tensor's CPU allocator (counted as workspace memory).
template <class T>
class Workspace {
 public:
  Workspace(int32_t device, int64_t n)
      : device_(device),
        bytes_(static_cast<int64_t>(sizeof(T)) * (n > 0 ? n : 1)),
        p_(static_cast<T*>(isa_alloc(device, bytes_))) {}
  ~Workspace() { isa_free(device_, p_, bytes_); }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  T* data() const { return p_; }

 private:
  int32_t device_;
  int64_t bytes_;
  T* p_;
};

// Exports a kernel: Adapt<&fn>::run takes the slot's ABI arguments
// (TensorViews for Tensors) and calls fn with this level's Tensors.
template <class A>
struct Held {
  using type = std::remove_cvref_t<A>;
  static const type& make(const type& a) { return a; }
};
template <>
struct Held<const Tensor&> {
  using type = Tensor;
  static Tensor make(const TensorView& v) { return Tensor(v); }
};
template <>
struct Held<Tensor&> : Held<const Tensor&> {};
template <class A>
struct AbiParam {
  using type = A;
};
template <>
struct AbiParam<const Tensor&> {
  using type = const TensorView&;
};
template <>
struct AbiParam<Tensor&> {
  using type = const TensorView&;
};

template <auto F>
struct Adapt;
template <class R, class... A, R (*F)(A...)>
struct Adapt<F> {
  static R run(typename AbiParam<A>::type... a) {
    std::tuple<typename Held<A>::type...> held{Held<A>::make(a)...};
    return std::apply(F, held);
  }
};

}  // namespace gpipe::ops::cpu::GPIPE_ISA_NS

// At the end of a kernel file, inside its GPIPE_ISA_NS namespace: exports
// kernel function `fn` for slot gpipe::ops::`slot` (declared in the family's
// ops/*_kernels.h, which the file includes for the slot's type only).
#define GPIPE_ISA_KERNEL(slot, fn)                                      \
  extern const ::gpipe::ops::cpu::AbiFn<::gpipe::ops::slot> slot##_isa; \
  constinit const ::gpipe::ops::cpu::AbiFn<::gpipe::ops::slot> slot##_isa = &Adapt<&fn>::run
