// Tensor creation, element access, copies and device moves. Strided copies
// walk the destination in row-major order with a multi-index counter; the
// innermost axis is a tight loop over a fixed stride.
#include "core/tensor.h"

#include <cstring>
#include <iomanip>
#include <sstream>

#include "core/autograd.h"
#include "core/dtype_dispatch.h"
#include "core/rng.h"

namespace gpipe {
namespace {

// Every dtype has CPU element access.
template <class F>
decltype(auto) dispatch_any(DType dtype, F&& f) {
  return visit_dtype(dtype, "element access", std::forward<F>(f));
}

// One element converted between any two dtypes; the 16-bit formats go
// through float32 (rounding to nearest even).
template <class Dst, class Src>
Dst convert(Src v) {
  if constexpr (std::is_same_v<Dst, Src>) {
    return v;
  } else if constexpr (std::is_same_v<Src, bfloat16>) {
    return convert<Dst>(bf16_bits_to_float(v.bits));
  } else if constexpr (std::is_same_v<Src, float16>) {
    return convert<Dst>(f16_bits_to_float(v.bits));
  } else if constexpr (std::is_same_v<Dst, bfloat16>) {
    return bfloat16{float_to_bf16_bits(static_cast<float>(v))};
  } else if constexpr (std::is_same_v<Dst, float16>) {
    return float16{float_to_f16_bits(static_cast<float>(v))};
  } else {
    return static_cast<Dst>(v);
  }
}

// Visits every innermost row of `shape` in row-major order, calling
// f(src_off, dst_off) with the offsets of the row's first element.
template <class F>
void for_each_row(const Shape& shape, const std::vector<int64_t>& s1, int64_t o1,
                  const std::vector<int64_t>& s2, int64_t o2, F&& f) {
  const int64_t r = shape.rank();
  if (shape.numel() == 0) return;
  if (r == 0) {
    f(o1, o2);
    return;
  }
  std::vector<int64_t> idx(r, 0);
  while (true) {
    int64_t a = o1, b = o2;
    for (int64_t d = 0; d < r - 1; ++d) {
      a += idx[d] * s1[d];
      b += idx[d] * s2[d];
    }
    f(a, b);
    int64_t d = r - 2;
    for (; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

// Visits every element of `shape` in row-major order, calling f(src_off, dst_off).
template <class F>
void for_each_offset(const Shape& shape, const std::vector<int64_t>& s1, int64_t o1,
                     const std::vector<int64_t>& s2, int64_t o2, F&& f) {
  const int64_t r = shape.rank();
  const int64_t inner = r == 0 ? 1 : shape[r - 1], i1 = r == 0 ? 0 : s1[r - 1],
                i2 = r == 0 ? 0 : s2[r - 1];
  for_each_row(shape, s1, o1, s2, o2, [&](int64_t a, int64_t b) {
    for (int64_t k = 0; k < inner; ++k) f(a + k * i1, b + k * i2);
  });
}

template <class Src, class Dst>
void convert_copy(const Tensor& src, Tensor& dst) {
  const Src* s = static_cast<const Src*>(src.storage()->data());
  Dst* d = static_cast<Dst*>(dst.storage()->data());
  const auto copy_run = [](const Src* from, Dst* to, int64_t count) {
    if constexpr (std::is_same_v<Src, Dst>) {
      std::memcpy(to, from, static_cast<size_t>(count) * sizeof(Src));
    } else {
      for (int64_t k = 0; k < count; ++k) to[k] = convert<Dst>(from[k]);
    }
  };
  if (src.is_contiguous() && dst.is_contiguous()) {
    copy_run(s + src.offset(), d + dst.offset(), src.numel());
    return;
  }
  const int64_t r = src.rank();
  if (r > 0 && src.strides()[r - 1] == 1 && dst.strides()[r - 1] == 1) {
    // Rows contiguous on both sides (a concat's or split's pieces, a narrowed
    // last axis, a cache grown along time): a row at a time, as the
    // contiguous case copies, not an element at a time through the strides.
    const int64_t inner = src.shape()[r - 1];
    for_each_row(src.shape(), src.strides(), src.offset(), dst.strides(), dst.offset(),
                 [&](int64_t a, int64_t b) { copy_run(s + a, d + b, inner); });
    return;
  }
  for_each_offset(src.shape(), src.strides(), src.offset(), dst.strides(), dst.offset(),
                  [&](int64_t a, int64_t b) { d[b] = convert<Dst>(s[a]); });
}

DeviceCopyFn g_copy[kNumDeviceTypes] = {nullptr, nullptr};
DeviceFillFn g_fill[kNumDeviceTypes] = {nullptr, nullptr};

// Element-wise copy with dtype conversion between two views of one shape. A
// copy with a non-CPU side goes to that device kind's registered hook.
void cpu_copy(const Tensor& src, Tensor& dst) {
  GPIPE_ASSERT(src.shape() == dst.shape(), src.shape(), " vs ", dst.shape());
  if (!src.device().is_cpu() || !dst.device().is_cpu()) {
    const DeviceType t = src.device().is_cpu() ? dst.device().type : src.device().type;
    DeviceCopyFn f = g_copy[static_cast<int>(t)];
    GPIPE_CHECK(f != nullptr, "copy from ", src.device(), " to ", dst.device(),
                " needs a CUDA build");
    f(src, dst);
    return;
  }
  dispatch_any(src.dtype(), [&](auto s) {
    dispatch_any(dst.dtype(), [&](auto d) { convert_copy<decltype(s), decltype(d)>(src, dst); });
  });
}

int64_t flat_offset(const Tensor& t, std::initializer_list<int64_t> index) {
  GPIPE_CHECK(static_cast<int64_t>(index.size()) == t.rank(), "element access: got ", index.size(),
              " indices for a tensor of shape ", t.shape());
  int64_t off = t.offset(), d = 0;
  for (int64_t i : index) {
    GPIPE_CHECK(i >= 0 && i < t.shape()[d], "element access: index ", i, " out of range for axis ",
                d, " of shape ", t.shape());
    off += i * t.strides()[d++];
  }
  return off;
}

}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape) GPIPE_CHECK(d >= 0, "tensor shape ", shape, " has a negative size");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(static_cast<size_t>(shape.numel()) * dtype_size(dtype),
                                            device, current_memory_category());
  impl->shape = shape;
  impl->strides = shape.contiguous_strides();
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  return full(shape, 0.0, dtype, device);
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill(value);
  return t;
}

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  GPIPE_CHECK(static_cast<int64_t>(values.size()) == shape.numel(), "from_vector: ", values.size(),
              " values do not fill shape ", shape, " (", shape.numel(), " elements)");
  Tensor t = empty(shape, dtype_of<T>());
  std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(T));
  return t;
}
template Tensor Tensor::from_vector(const std::vector<float>&, const Shape&);
template Tensor Tensor::from_vector(const std::vector<double>&, const Shape&);
template Tensor Tensor::from_vector(const std::vector<int32_t>&, const Shape&);
template Tensor Tensor::from_vector(const std::vector<int64_t>&, const Shape&);

Tensor Tensor::scalar(double value, DType dtype) { return full(Shape{}, value, dtype); }

Tensor Tensor::randn(const Shape& shape, uint64_t seed, double stddev, DType dtype) {
  Tensor t = empty(shape, dtype);
  dispatch_floating(dtype, "randn", [&](auto z) {
    using T = decltype(z);
    T* p = t.data<T>();
    philox_normal(seed, 0, p, t.numel());
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<T>(p[i] * stddev);
  });
  return t;
}

Tensor Tensor::uniform(const Shape& shape, uint64_t seed, double lo, double hi, DType dtype) {
  Tensor t = empty(shape, dtype);
  dispatch_floating(dtype, "uniform", [&](auto z) {
    using T = decltype(z);
    T* p = t.data<T>();
    philox_uniform(seed, 0, p, t.numel());
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<T>(lo + (hi - lo) * p[i]);
  });
  return t;
}

Tensor Tensor::make_view(const Tensor& base, const Shape& shape, std::vector<int64_t> strides,
                         int64_t offset) {
  GPIPE_ASSERT(static_cast<int64_t>(strides.size()) == shape.rank());
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->shape = shape;
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

bool Tensor::is_contiguous() const {
  const auto expected = shape().contiguous_strides();
  for (int64_t d = 0; d < rank(); ++d)
    if (shape()[d] != 1 && strides()[d] != expected[d]) return false;
  return true;
}

void* Tensor::raw_data() const {
  return static_cast<char*>(storage()->data()) +
         offset() * static_cast<int64_t>(dtype_size(dtype()));
}

double Tensor::item() const {
  GPIPE_CHECK(numel() == 1, "item(): expected a tensor with one element, got shape ", shape());
  Tensor c = device().is_cpu() ? *this : to(kCpu);
  return dispatch_any(c.dtype(), [&](auto z) { return convert<double>(*c.data<decltype(z)>()); });
}

double Tensor::at(std::initializer_list<int64_t> index) const {
  GPIPE_CHECK(device().is_cpu(), "at(): element access needs a CPU tensor, this one is on ",
              device());
  const int64_t off = flat_offset(*this, index);
  return dispatch_any(dtype(), [&](auto z) {
    return convert<double>(static_cast<const decltype(z)*>(storage()->data())[off]);
  });
}

void Tensor::set(std::initializer_list<int64_t> index, double value) {
  GPIPE_CHECK(device().is_cpu(), "set(): element access needs a CPU tensor, this one is on ",
              device());
  const int64_t off = flat_offset(*this, index);
  dispatch_any(dtype(), [&](auto z) {
    static_cast<decltype(z)*>(storage()->data())[off] = convert<decltype(z)>(value);
  });
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = device().is_cpu() ? *this : to(kCpu);
  Tensor out = empty(shape(), dtype_of<T>());
  cpu_copy(c, out);
  const T* p = out.data<T>();
  return std::vector<T>(p, p + numel());
}
template std::vector<float> Tensor::to_vector() const;
template std::vector<double> Tensor::to_vector() const;
template std::vector<int32_t> Tensor::to_vector() const;
template std::vector<int64_t> Tensor::to_vector() const;

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  Tensor out = empty(shape(), dtype(), device());
  out.copy_from(*this);
  record("contiguous", {*this}, out,
         [](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0]}; });
  return out;
}

Tensor Tensor::to(Device target) const {
  if (device() == target) return *this;
  Tensor out = empty(shape(), dtype(), target);
  out.copy_from(*this);
  const Device src = device();
  record("to_device", {*this}, out,
         [src](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0].to(src)}; });
  return out;
}

Tensor Tensor::to(DType target) const {
  if (dtype() == target) return *this;
  Tensor out = empty(shape(), target, device());
  out.copy_from(*this);
  if (is_float_like(dtype()) && is_float_like(target)) {
    const DType src = dtype();
    record("to_dtype", {*this}, out,
           [src](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0].to(src)}; });
  }
  return out;
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), dtype(), device());
  out.copy_from(*this);
  return out;
}

Tensor Tensor::detach() const {
  Tensor v = make_view(*this, shape(), strides(), offset());
  return v;
}

void Tensor::copy_from(const Tensor& src) {
  GPIPE_CHECK(src.shape() == shape(), "copy_from: source shape ", src.shape(),
              " does not match destination shape ", shape());
  cpu_copy(src, *this);
}

void Tensor::fill(double value) {
  if (!device().is_cpu()) {
    DeviceFillFn f = g_fill[static_cast<int>(device().type)];
    GPIPE_CHECK(f != nullptr, "fill: ", device(), " tensors need a CUDA build");
    f(*this, value);
    return;
  }
  dispatch_any(dtype(), [&](auto z) {
    using T = decltype(z);
    T* base = static_cast<T*>(storage()->data());
    const T v = convert<T>(value);
    if (is_contiguous()) {
      std::fill(base + offset(), base + offset() + numel(), v);
    } else {
      for_each_offset(shape(), strides(), offset(), strides(), offset(),
                      [&](int64_t, int64_t b) { base[b] = v; });
    }
  });
}

Tensor& Tensor::set_requires_grad(bool on) {
  GPIPE_CHECK(is_leaf(),
              "set_requires_grad: only leaf tensors can be marked; this tensor is the "
              "result of '",
              grad_fn() ? "an op" : "", "' (use detach() first)");
  GPIPE_CHECK(!on || is_float_like(dtype()),
              "set_requires_grad: only float tensors can require "
              "grad, this one is ",
              dtype());
  impl().requires_grad = on;
  return *this;
}

void Tensor::set_grad(const Tensor& g) {
  if (g.defined())
    GPIPE_CHECK(g.shape() == shape(), "set_grad: gradient shape ", g.shape(),
                " does not match tensor shape ", shape());
  impl().grad = g.impl_ptr();
}

void Tensor::zero_grad() { impl().grad.reset(); }

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  gpipe::backward({*this}, grad.defined() ? std::vector<Tensor>{grad} : std::vector<Tensor>{},
                  retain_graph);
}

std::string Tensor::str(int64_t max_elements) const {
  std::ostringstream os;
  os << "Tensor(shape=" << shape() << ", dtype=" << dtype() << ", device=" << device();
  if (requires_grad()) os << ", requires_grad";
  os << ")";
  if (device().is_cpu() && (is_floating(dtype()) || is_integral(dtype()))) {
    const auto v = to_vector<double>();
    os << " [";
    for (int64_t i = 0; i < std::min<int64_t>(numel(), max_elements); ++i)
      os << (i ? ", " : "") << std::setprecision(6) << v[i];
    if (numel() > max_elements) os << ", ... (" << numel() << " total)";
    os << "]";
  }
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

void register_copy(DeviceType type, DeviceCopyFn fn) { g_copy[static_cast<int>(type)] = fn; }
void register_fill(DeviceType type, DeviceFillFn fn) { g_fill[static_cast<int>(type)] = fn; }

}  // namespace gpipe
