// Tensor: a strided view onto shared Storage, plus autograd metadata.
//
// A Tensor is a cheap handle (shared_ptr to TensorImpl); copies alias. Views
// (reshape, permute, slice, narrow, ...) are ops in ops/shape.h and share the
// storage; differentiable math lives in ops/. This header holds creation,
// element access for tests, device moves and the autograd surface
// (requires_grad, grad, backward).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "core/allocator.h"
#include "core/dtype.h"
#include "core/dtype_dispatch.h"
#include "core/error.h"
#include "core/shape.h"
#include "core/storage.h"

namespace gpipe {

class Node;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  std::vector<int64_t> strides;  // in elements
  int64_t offset = 0;            // in elements
  DType dtype = DType::kFloat32;

  // autograd
  bool requires_grad = false;
  std::shared_ptr<Node> grad_fn;  // set on non-leaf results of recorded ops
  uint32_t output_nr = 0;         // which output of grad_fn this is
  std::shared_ptr<TensorImpl> grad;
  std::weak_ptr<Node> grad_accumulator;  // leaves only
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // --- creation (charged to the calling thread's MemoryCategory) ---
  static Tensor empty(const Shape& shape, DType dtype = DType::kFloat32, Device device = kCpu);
  static Tensor zeros(const Shape& shape, DType dtype = DType::kFloat32, Device device = kCpu);
  static Tensor full(const Shape& shape, double value, DType dtype = DType::kFloat32,
                     Device device = kCpu);
  // Copies `values` (row-major) into a new CPU tensor; numel must match.
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape);
  static Tensor scalar(double value, DType dtype = DType::kFloat32);
  // Deterministic N(0, stddev^2) / U[lo, hi) from the counter-based RNG keyed by `seed`.
  static Tensor randn(const Shape& shape, uint64_t seed, double stddev = 1.0,
                      DType dtype = DType::kFloat32);
  static Tensor uniform(const Shape& shape, uint64_t seed, double lo, double hi,
                        DType dtype = DType::kFloat32);
  // A view with explicit geometry over `base`'s storage (no autograd; ops use it).
  static Tensor make_view(const Tensor& base, const Shape& shape, std::vector<int64_t> strides,
                          int64_t offset);

  // --- metadata ---
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  int64_t rank() const { return impl().shape.rank(); }
  int64_t size(int64_t axis) const { return impl().shape.size(axis); }
  int64_t numel() const { return impl().shape.numel(); }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  const std::vector<int64_t>& strides() const { return impl().strides; }
  int64_t offset() const { return impl().offset; }
  bool is_contiguous() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype()); }
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  bool shares_storage_with(const Tensor& o) const { return storage() == o.storage(); }

  // Pointer to element 0 of this view. data<T>() checks that T matches dtype().
  void* raw_data() const;
  template <class T>
  T* data() const {
    GPIPE_CHECK(dtype_of<T>() == dtype(), "tensor of dtype ", dtype(), " accessed as ",
                dtype_of<T>());
    return static_cast<T*>(raw_data());
  }

  // --- element access for tests and small tools (CPU, any dtype, converts to double) ---
  double item() const;  // numel must be 1
  double at(std::initializer_list<int64_t> index) const;
  void set(std::initializer_list<int64_t> index, double value);
  template <class T>
  std::vector<T> to_vector() const;  // row-major copy, converting dtype

  // --- copies and moves ---
  // A contiguous copy, or *this if already contiguous (differentiable).
  Tensor contiguous() const;
  // A copy on `device` (differentiable); *this if already there.
  Tensor to(Device device) const;
  // Same values, converted dtype (not differentiable across integer types).
  Tensor to(DType dtype) const;
  // A new tensor with the same values and no autograd history.
  Tensor clone() const;
  // Shares storage, drops autograd history; requires_grad false.
  Tensor detach() const;
  // Copies src's values into this tensor in place (no autograd); shapes must match.
  void copy_from(const Tensor& src);
  void fill(double value);

  // --- autograd ---
  bool requires_grad() const { return impl().requires_grad; }
  // Only on leaves (tensors without grad_fn); returns *this.
  Tensor& set_requires_grad(bool on);
  bool is_leaf() const { return impl().grad_fn == nullptr; }
  const std::shared_ptr<Node>& grad_fn() const { return impl().grad_fn; }
  uint32_t output_nr() const { return impl().output_nr; }
  // The accumulated gradient (undefined until a backward reaches this leaf).
  Tensor grad() const { return impl().grad ? Tensor(impl().grad) : Tensor(); }
  void set_grad(const Tensor& g);
  void zero_grad();  // drops the gradient
  // Backward from this tensor; `grad` defaults to ones for a one-element tensor.
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;

  std::string str(int64_t max_elements = 64) const;
  TensorImpl& impl() const {
    GPIPE_CHECK(impl_ != nullptr, "operation on an undefined tensor");
    return *impl_;
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Device backends plug their copies and fills in here (the CUDA runtime does,
// from runtime/cuda/copy.cc). copy_from, to(Device), to(DType), contiguous
// and clone call the copy hook of the non-CPU side when either tensor is not
// on the CPU (shapes already checked; it converts dtypes and honours strides
// on both sides); fill calls the fill hook of the tensor's device kind.
// Without a hook these throw "needs a CUDA build", as before.
using DeviceCopyFn = void (*)(const Tensor& src, Tensor& dst);
using DeviceFillFn = void (*)(Tensor& dst, double value);
void register_copy(DeviceType type, DeviceCopyFn fn);
void register_fill(DeviceType type, DeviceFillFn fn);

// Calls f with a value of the C++ type matching `dtype` (float or double only);
// throws naming `op` for other dtypes (core/dtype_dispatch.h).
template <class F>
decltype(auto) dispatch_floating(DType dtype, const char* op, F&& f) {
  return visit_dtype<kFloatingDTypes>(dtype, op, std::forward<F>(f));
}

// Integer index dtypes (int32 / int64).
template <class F>
decltype(auto) dispatch_index(DType dtype, const char* op, F&& f) {
  return visit_dtype<kIndexDTypes>(dtype, op, std::forward<F>(f));
}

}  // namespace gpipe
